"""Small runnable examples of using v2."""
