"""Take the manual's picture of an HTML report: load the page in the system's headless Chromium (through
Selenium) and save a screenshot of its first screenful.

    python docs/report_screenshot.py out/matrix/matrix-plan.html [docs/assets/report-matrix.png]
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
from pathlib import Path


def main(page: str, out: str = str(Path(__file__).parent / "assets" / "report-matrix.png")) -> int:
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service

    options = webdriver.ChromeOptions()
    options.binary_location = shutil.which("chromium") or "chromium"
    for arg in ("--headless=new", "--no-sandbox", "--disable-gpu", "--hide-scrollbars", "--window-size=1400,1500"):
        options.add_argument(arg)
    scratch = tempfile.mkdtemp(prefix="vx-")  # Chromium leaves a folder in TMPDIR: in this one, removed after
    service = Service(shutil.which("chromedriver") or "chromedriver", env={**os.environ, "TMPDIR": scratch})
    driver = webdriver.Chrome(service=service, options=options)
    try:
        driver.get(Path(page).resolve().as_uri())
        driver.save_screenshot(out)
    finally:
        driver.quit()
        shutil.rmtree(scratch, ignore_errors=True)
    print(f"wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main(*sys.argv[1:3]) if len(sys.argv) > 1 else "usage: report_screenshot.py PAGE.html [OUT.png]")
