"""caseshelf: a registry for evaluation datasets."""

__version__ = "0.1.0"
