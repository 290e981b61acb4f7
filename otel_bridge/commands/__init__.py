"""commands subpackage."""
