"""Snapshot filters: conditions parsed, checked against an allow-list and re-rendered as SQL, never
pasted as text. Pure; imports only the core."""
