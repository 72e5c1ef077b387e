"""How the process runs: its event loop, and the modules it imports only when needed."""
