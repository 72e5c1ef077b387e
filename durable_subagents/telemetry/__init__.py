"""Traces and metrics: the spans of model turns, tool calls and compactions; the metrics."""
