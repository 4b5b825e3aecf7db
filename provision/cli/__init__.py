"""The command line: the click group (app), one module per command, shared options and output."""
