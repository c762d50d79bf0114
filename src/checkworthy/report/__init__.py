"""Reports: analyses over stored runs, the method comparison, Markdown/HTML rendering and plots."""
