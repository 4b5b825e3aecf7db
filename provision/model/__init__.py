"""The typed records the stages hand each other: pure frozen dataclasses, importing nothing of provision but errors."""
