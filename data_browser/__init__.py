"""A read-only web browser over lab prefixes: step outputs, records, experiments and training curves."""

from data_browser.config import BrowserConfig

__all__ = ["BrowserConfig"]
