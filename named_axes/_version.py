"""The package's version (a module of its own, so that any layer may read it; setup.cfg
repeats it)."""
__version__ = "0.1.0"
