"""Replay recorded agent sessions through the pipeline and measure every decision."""
