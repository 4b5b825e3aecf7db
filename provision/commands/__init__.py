"""One module per CLI command; each is imported only when its command runs (see cli.COMMANDS)."""
