"""The generated bad-input matrix (issue 16): ``registry`` (one valid call per public callable) and
its test."""
