"""Traces: the Chrome/Perfetto JSON writer, readers of measured traces, and comparison."""
