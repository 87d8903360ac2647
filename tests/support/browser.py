"""The dashboard in headless Chromium (no tests here): screenshots of its pages, waiting for the
address bar, and the contrast of its colours (WCAG 2)."""

from __future__ import annotations

from selenium.webdriver.support.wait import WebDriverWait

from support.paths import ROOT

__all__ = ["SCREENSHOTS", "STYLESHEET", "contrast", "screenshot", "wait_for_url"]

SCREENSHOTS = ROOT / "artifacts" / "screenshots"
STYLESHEET = ROOT / "dashboard" / "assets" / "fleetwatch.css"


def screenshot(dash_duo, name: str) -> None:
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    dash_duo.driver.set_window_size(1400, 1000)
    dash_duo.driver.save_screenshot(str(SCREENSHOTS / f"{name}.png"))


def wait_for_url(dash_duo, url: str) -> None:
    """The address bar follows the filters (history.replaceState, no navigation to wait on)."""
    WebDriverWait(dash_duo.driver, 4).until(lambda d: d.current_url == url,
                                            f"the address never became {url}")


def contrast(a: tuple[float, ...], b: tuple[float, ...]) -> float:
    """The WCAG 2 contrast ratio of two RGB colours (1 to 21)."""
    def lum(rgb: tuple[float, ...]) -> float:
        c = [x / 255 for x in rgb[:3]]
        c = [x / 12.92 if x <= 0.03928 else ((x + 0.055) / 1.055) ** 2.4 for x in c]
        return 0.2126 * c[0] + 0.7152 * c[1] + 0.0722 * c[2]
    hi, lo = sorted((lum(a), lum(b)), reverse=True)
    return (hi + 0.05) / (lo + 0.05)
