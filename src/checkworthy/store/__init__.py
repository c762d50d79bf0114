"""The store: the engine and migrations, and every SQL statement the package runs."""
