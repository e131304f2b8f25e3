"""The context pipeline: keep every request inside the window, durably."""
