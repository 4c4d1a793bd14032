"""The notebooks as their readers meet them (issue 26): a paper notebook run in JupyterLab, started as `make lab` starts
it, in a real headless Chromium, shows every figure inline under the cell that makes it (once), its progress widgets and
no error; and papermill's executed copy under runs/ holds the figures too.

The browser test needs Debian's `chromium` and `chromium-driver` (`make test` installs them as root with apt-get: the
Makefile's `browser-tool`) and selenium (the dev extra); nothing is downloaded at test time. Without them it is skipped,
with the reason. Set MAD_STUDY_LAB_SCREENSHOT=<file.png> to keep a copy of its screenshot.
"""
import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from conftest import ROOT, mad_study

NOTEBOOK = "nbs/papers/baseline/09_baseline.ipynb"      # the fastest paper notebook (~10 s with synthetic agents)


def test_executed_copy_holds_the_figures(scratch):
    "Under `mad-study reproduce` (papermill) the executed copy has the figure as an image/png output of its cell, once,"
    "even with MPLBACKEND=Agg in the environment (as `make` exports it): the kit's kernels draw inline."
    r = mad_study("reproduce", "du_gsm8k", "--profile", "sim", env={**os.environ, "MPLBACKEND": "Agg"})
    assert r.returncode == 0, r.stdout + r.stderr
    nb = json.loads((scratch / "runs/sim/du_gsm8k/09_baseline.ipynb").read_text())
    pngs = {i: sum("image/png" in o.get("data", {}) for o in c.get("outputs", [])) for i, c in enumerate(nb["cells"])}
    makers = {i: "".join(c["source"]).count("save_figure(") for i, c in enumerate(nb["cells"]) if c["cell_type"] == "code"}
    assert {i: n for i, n in pngs.items() if n} == {i: n for i, n in makers.items() if n}, (pngs, makers)
    assert not [o for c in nb["cells"] for o in c.get("outputs", []) if o["output_type"] == "error"]
    assert (scratch / "figures/baseline/baseline.png").exists()        # and save_figure still wrote the files


# ---------------------------------------------------------------------------------------------------- the browser test
def _browser():
    "(chromium, chromedriver) paths, or skip with the reason."
    chrome = next(filter(None, map(shutil.which, ("chromium", "chromium-browser"))), None)
    driver = shutil.which("chromedriver")
    if not (chrome and driver):
        pytest.skip("no Chromium here (Debian: apt-get install chromium chromium-driver; `make test` does it as root)")
    pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")
    if not shutil.which("make"): pytest.skip("`make` is missing: the test starts JupyterLab with `make lab`")
    return chrome, driver


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("localhost", 0)); return s.getsockname()[1]


def _lab_settings(d: Path) -> Path:
    "A scratch JupyterLab settings folder: no autosave (the test never writes into nbs/), every cell kept in the DOM."
    for plugin, value in {"docmanager-extension/plugin": {"autosave": False},
                          "notebook-extension/tracker": {"windowingMode": "none"},
                          "apputils-extension/notification": {"fetchNews": "false", "checkForUpdates": False}}.items():
        f = d / "@jupyterlab" / f"{plugin}.jupyterlab-settings"
        f.parent.mkdir(parents=True, exist_ok=True); f.write_text(json.dumps(value))
    return d


@pytest.fixture
def lab(tmp_path, scratch):
    "JupyterLab started by `make lab` (LAB_CMD) on a free port with a token; yields its base URL and token."
    port, token = _free_port(), os.urandom(12).hex()
    # the generation bar at once (it waits 2 s of work by default, and is off under tests unless asked)
    env = {**os.environ, "MAD_STUDY_PROGRESS": "1", "MAD_STUDY_PROGRESS_DELAY": "0",
           "JUPYTERLAB_SETTINGS_DIR": str(_lab_settings(tmp_path / "settings")),
           "JUPYTERLAB_WORKSPACES_DIR": str(tmp_path / "workspaces"), "JUPYTER_RUNTIME_DIR": str(tmp_path / "runtime"),
           "MPLBACKEND": "Agg"}                  # as `make` exports it: `make lab` must unset it for the kernels
    venv = Path(sys.executable).parent.parent
    # -o: never rebuild the venv here; VENV: this interpreter's environment
    cmd = ["make", "-s", "-C", str(ROOT), "-o", str(venv / ".installed"), "lab", f"VENV={venv}", f"LAB_PORT={port}",
           f"LAB_ARGS=--no-browser --IdentityProvider.token={token}"]
    log = open(tmp_path / "lab.log", "wb")
    proc = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://localhost:{port}"
    deadline = time.monotonic() + 60
    while True:                                  # wait until the server answers (or has died)
        try:
            urllib.request.urlopen(f"{url}/api/status?token={token}", timeout=2); break
        except OSError:
            if proc.poll() is not None or time.monotonic() > deadline:
                os.killpg(proc.pid, signal.SIGKILL) if proc.poll() is None else None
                pytest.fail("JupyterLab did not start:\n" + (tmp_path / "lab.log").read_text()[-3000:])
            time.sleep(0.2)
    yield url, token
    os.killpg(proc.pid, signal.SIGTERM)          # the process group this fixture started (make, jupyter, kernels)
    try: proc.wait(10)
    except subprocess.TimeoutExpired: os.killpg(proc.pid, signal.SIGKILL); proc.wait()
    log.close()


@pytest.fixture
def chromium(tmp_path):
    "A headless Chromium driven by Debian's chromedriver (selenium never downloads a browser or a driver here)."
    chrome, driver = _browser()
    from selenium import webdriver
    from selenium.webdriver.chrome.service import Service
    opts = webdriver.ChromeOptions()
    opts.binary_location = chrome
    for a in ("--headless=new", "--no-sandbox", "--disable-dev-shm-usage", "--disable-gpu", "--window-size=1400,1000",
              f"--user-data-dir={tmp_path / 'chromium'}"):
        opts.add_argument(a)
    drv = webdriver.Chrome(service=Service(executable_path=driver), options=opts)
    yield drv
    drv.quit()


# every output element added under a cell while it runs (a progress bar closes itself when its loop ends)
_WATCH = """window.__seen = []; new MutationObserver(ms => ms.forEach(m => m.addedNodes.forEach(n => {
  if (n.nodeType === 1 && n.closest('.jp-OutputArea')) window.__seen.push(n.className + ' ' +
      Array.from(n.querySelectorAll('*')).map(e => e.className).join(' '));
}))).observe(document.body, {childList: true, subtree: true});"""

# per code cell: its prompt, its source, its error outputs, its images (loaded or not) and its text outputs
_CELLS = """return Array.from(document.querySelectorAll('.jp-Notebook .jp-CodeCell')).map(c => ({
  prompt: (c.querySelector('.jp-InputPrompt') || {}).textContent || '',
  source: Array.from(c.querySelectorAll('.cm-line')).map(l => l.textContent).join('\\n'),
  errors: c.querySelectorAll('.jp-OutputArea-output[data-mime-type="application/vnd.jupyter.stderr"] .jp-mod-error, ' +
                             '[data-mime-type="application/vnd.jupyter.error"]').length,
  images: Array.from(c.querySelectorAll('.jp-OutputArea-output img')).map(i => i.complete && i.naturalWidth > 0),
  text: Array.from(c.querySelectorAll('.jp-OutputArea-output')).map(o => o.textContent).join('\\n')}));"""


def _run_all(drv, wait):
    "Run → Run All Cells, through the menu as a reader does."
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as EC
    menu = wait.until(EC.element_to_be_clickable((By.XPATH, "//li[contains(@class,'lm-MenuBar-item')][normalize-space(.)='Run']")))
    menu.click()
    wait.until(EC.element_to_be_clickable((By.XPATH, "//li[contains(@class,'lm-Menu-item')]"
                                                 "[.//div[contains(@class,'lm-Menu-itemLabel')][normalize-space(.)='Run All Cells']]"))).click()


def test_paper_notebook_in_jupyterlab_shows_its_figures_inline(lab, chromium, tmp_path):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support.ui import WebDriverWait
    url, token = lab
    before = (ROOT / NOTEBOOK).read_bytes()
    drv, wait = chromium, WebDriverWait(chromium, 60, poll_frequency=0.1)
    drv.get(f"{url}/lab/tree/{NOTEBOOK}?token={token}")
    # the notebook is open (every code cell in the DOM) and its kernel started and idle (the server's sessions say so);
    # should JupyterLab ask which kernel to start, the reader accepts its proposal (the kit's `python3`)
    n_code = sum(c["cell_type"] == "code" for c in json.loads(before)["cells"])
    def ready(d):
        for b in d.find_elements(By.CSS_SELECTOR, ".jp-Dialog .jp-mod-accept"): b.click(); return False
        sessions = json.load(urllib.request.urlopen(f"{url}/api/sessions?token={token}", timeout=5))
        return (len(d.find_elements(By.CSS_SELECTOR, ".jp-Notebook .jp-CodeCell")) == n_code and
                any(s["path"].endswith(Path(NOTEBOOK).name) and (s.get("kernel") or {}).get("execution_state") == "idle"
                    for s in sessions))
    wait.until(ready)
    drv.execute_script(_WATCH)
    _run_all(drv, wait)
    shot = tmp_path / "lab.png"
    try: cells = wait.until(lambda d: (cs := d.execute_script(_CELLS)) and all(c["prompt"].strip() not in ("[ ]:", "[*]:", "")
                                                                              for c in cs) and cs)
    except Exception: drv.save_screenshot(str(shot)); raise         # what the page showed when it did not finish
    # which code cells make a figure, read from the notebook file: CodeMirror renders only the lines of a cell that are
    # near the view, so a long figure cell's `save_figure(` line may be absent from the page's text
    code = [''.join(c["source"]) for c in json.loads(before)["cells"] if c["cell_type"] == "code"]
    makers = {i: src.count("save_figure(") for i, src in enumerate(code) if "save_figure(" in src}
    assert len(cells) == len(code), (len(cells), len(code))
    figure_cells = [{**cells[i], "makes": k} for i, k in makers.items()]
    drv.execute_script("const cs = document.querySelectorAll('.jp-Notebook .jp-CodeCell'); "
                       "cs[arguments[0]].scrollIntoView({block: 'center'});", max(makers) if makers else 0)
    drv.save_screenshot(str(shot))
    if os.environ.get("MAD_STUDY_LAB_SCREENSHOT"): shutil.copy(shot, os.environ["MAD_STUDY_LAB_SCREENSHOT"])
    assert [c["prompt"] for c in cells if c["errors"]] == [], "error output in the lab"
    assert figure_cells, "the notebook makes no figure?"
    for c in figure_cells:               # each figure once, rendered, under the cell that makes it
        assert c["images"] == [True] * c["makes"], (c["prompt"], c["images"])
    assert sum(len(c["images"]) for c in cells) == sum(len(c["images"]) for c in figure_cells)
    seen = drv.execute_script("return window.__seen;")
    assert any("widget-hprogress" in s or "widget-progress" in s for s in seen), f"no progress widget was rendered: {seen[:5]}"
    assert not any("Error displaying widget" in c["text"] or "FloatProgress(" in c["text"] for c in cells)
    assert (ROOT / NOTEBOOK).read_bytes() == before           # the lab never saved into nbs/
    assert shot.stat().st_size > 10_000
