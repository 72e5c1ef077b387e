"""Words people read: errors as one line, text fit for a terminal, Markdown for the Web UI."""
