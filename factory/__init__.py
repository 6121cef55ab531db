"""factory package."""
