# helpers for the shell tests
