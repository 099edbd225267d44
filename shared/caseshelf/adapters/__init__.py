"""Adapters: the embedded store (local files + SQLite) and AWS (S3 + DynamoDB)."""
