"""What crosses the wire to and from Temporal.

The activities' and workflows' payloads, their encryption (the payload codec), the
stream's items and the search attributes.
"""
