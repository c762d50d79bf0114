"""Data in and out of files: dataset loaders, user CSVs, label files, the label validation suite
and DVC versioning."""
