"""Leaf helpers for durable work: finish a step even when its caller is cancelled."""
