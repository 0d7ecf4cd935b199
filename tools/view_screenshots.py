"""The screenshots of docs/view.md, taken with Playwright in headless Chromium from real runs.

Usage: python tools/view_screenshots.py OUTPUT_DIR [--out docs/images]

OUTPUT_DIR holds runs of the demo workflow suite (examples/travel/suite.yaml) made by
`evalpipe run`: two of them (the second with another target version), the first blessed, as
tests/view/conftest.py makes them. The view is served in this process on a free loopback port.
"""

from __future__ import annotations

import argparse
import os
import shutil
import socket
import sys
import threading
import time
from pathlib import Path

import httpx
import uvicorn
from playwright.sync_api import sync_playwright

from evalpipe.artifacts import find_runs, read_table
from evalpipe.view.app import create_app
from evalpipe.view.urls import compare_path, item_path, samples_path, trends_path

ARGS = ["--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-background-networking"]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("output_dir")
    parser.add_argument("--out", type=Path, default=Path("docs/images"))
    args = parser.parse_args()
    runs = [r for r in find_runs(args.output_dir) if r.suite == "travel-demo"]
    if len(runs) < 2:
        raise SystemExit("needs two runs of travel-demo in OUTPUT_DIR")
    newest = runs[0]
    items = read_table(newest.location, "scores", columns=["agent", "item_id", "item_status"])
    failed = next(
        r for r in items.to_pylist() if r["agent"] == "writer" and r["item_status"] == "fail"
    )

    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    url = f"http://127.0.0.1:{sock.getsockname()[1]}"
    server = uvicorn.Server(
        uvicorn.Config(create_app(args.output_dir), log_level="warning", lifespan="off")
    )
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    for _ in range(100):
        try:
            httpx.get(url + "/", timeout=5)
            break
        except httpx.HTTPError:
            time.sleep(0.2)
    s, r = newest.suite, newest.run_name
    shots = {
        "view-runs.png": "/",
        "view-samples.png": samples_path(s, r, status="fail", agent="writer"),
        "view-item.png": item_path(s, r, failed["agent"], failed["item_id"]),
        "view-compare.png": compare_path(b=f"{s}/{r}"),
        "view-trends.png": trends_path(s),
    }
    chromium = os.environ.get("EVALPIPE_CHROMIUM") or shutil.which("chromium")
    args.out.mkdir(parents=True, exist_ok=True)
    try:
        with sync_playwright() as playwright:
            browser = playwright.chromium.launch(executable_path=chromium, args=ARGS)
            page = browser.new_page(viewport={"width": 1400, "height": 860})
            for name, path in shots.items():
                page.goto(url + path)
                page.screenshot(path=str(args.out / name))
                print(args.out / name)
            page.goto(url + shots["view-compare.png"])
            page.locator("a.flip-link").first.click()  # both transcripts of the first flip
            page.wait_for_load_state()
            page.screenshot(path=str(args.out / "view-flip.png"))
            print(args.out / "view-flip.png")
            browser.close()
    finally:
        server.should_exit = True
        thread.join(timeout=30)
    sys.exit(0)


if __name__ == "__main__":
    main()
