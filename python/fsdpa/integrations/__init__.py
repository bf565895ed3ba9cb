"""Adapters that plug fsdpa into other libraries (imported on demand)."""
