"""Shared HTTP pieces: resolver setup, error mapping, wire DTOs, the auth context."""
