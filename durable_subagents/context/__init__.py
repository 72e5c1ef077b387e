"""The model's context.

What a turn sends (the context view, its sizes), the structured answer's schema and
checks, and a turn's live text.
"""
