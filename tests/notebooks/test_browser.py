"""The tour notebook as a new user meets it: ``make lab``'s server driven by a real, headless Chromium.

The server is the one ``make lab`` starts (``scripts/lab.sh``, with the repository's ``.jupyter/``
settings) on a temporary copy of the repository, with an empty home folder. The browser double-clicks
``notebooks`` and ``00_tour.py`` in the file browser, checks that the notebook opened as a notebook and
is not marked unsaved, runs all cells from the Run menu, checks that no cell failed and the figures
were drawn, closes the tab (saving when asked, as most users do) and checks that the tracked ``.py``
is byte-identical and that nothing Jupyter writes landed in the home folder. Screenshots of every
step go to ``runs/browser/``.

Chromium comes from the Debian packages ``chromium`` and ``chromium-driver`` (``make browser-deps``,
a prerequisite of ``make test``); the test skips only where they are not installed.
"""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

CHROMIUM, CHROMEDRIVER = Path("/usr/bin/chromium"), Path("/usr/bin/chromedriver")
if not (CHROMIUM.is_file() and CHROMEDRIVER.is_file()):
    pytest.skip(f"Chromium is not installed ({CHROMIUM} / {CHROMEDRIVER} missing): `make browser-deps` installs "
                "the Debian packages chromium and chromium-driver, which needs root or password-less sudo",
                allow_module_level=True)
pytest.importorskip("jupyterlab", reason="JupyterLab is not installed (pip install -e '.[notebooks]')")
pytest.importorskip("selenium", reason="selenium is not installed (pip install -e '.[dev]')")

from selenium import webdriver  # noqa: E402
from selenium.common.exceptions import TimeoutException  # noqa: E402
from selenium.webdriver.chrome.service import Service  # noqa: E402
from selenium.webdriver.common.action_chains import ActionChains  # noqa: E402
from selenium.webdriver.common.by import By  # noqa: E402
from selenium.webdriver.support import expected_conditions as EC  # noqa: E402
from selenium.webdriver.support.ui import WebDriverWait  # noqa: E402

from lab_server import Lab, jupyter_command  # noqa: E402

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[2]
SHOTS = ROOT / "runs" / "browser"
# What `make lab` needs from the repository: its settings, launcher, notebooks and their parameters.
LAB_FILES = (".jupyter", "scripts/lab.sh", "scripts/prepare_lab.py", "notebooks", "configs", "jupytext.toml",
             "pyproject.toml")
LAB_SETTINGS = sorted(["jupyter_server_config.json", "labconfig", "default_setting_overrides.json"])
# As root, Chromium needs --no-sandbox; on a closed network the background services' connections are
# refused, so they are switched off; a fresh profile per run.
CHROMIUM_FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                  "--disable-background-networking", "--disable-component-update", "--disable-sync",
                  "--window-size=1400,1000")
TOUR = "00_tour.py"
RUN_ALL_TIMEOUT_S = 90
KERNEL_IDLE = (By.XPATH, "//div[contains(@class,'jp-StatusBar-Widget')]//span[contains(text(),'| Idle')]")


def _file_item(name: str) -> tuple[str, str]:
    return By.XPATH, f"//li[contains(@class,'jp-DirListing-item')][.//span[text()='{name}']]"


def _tab(name: str) -> tuple[str, str]:
    label = f"div[contains(@class,'lm-TabBar-tabLabel')][text()='{name}']"
    return By.XPATH, f"//li[contains(@class,'lm-TabBar-tab')][.//{label}]"


class Browser:
    """Headless Chromium on one JupyterLab page, with a screenshot per step."""

    def __init__(self, profile: Path):
        options = webdriver.ChromeOptions()
        options.binary_location = str(CHROMIUM)
        for flag in (*CHROMIUM_FLAGS, f"--user-data-dir={profile}"):
            options.add_argument(flag)
        self.driver = webdriver.Chrome(options=options, service=Service(str(CHROMEDRIVER)))
        self.shots: list[Path] = []

    def wait(self, seconds: float = 60) -> WebDriverWait:
        return WebDriverWait(self.driver, seconds)

    def double_click(self, locator: tuple[str, str]) -> None:
        ActionChains(self.driver).double_click(self.wait().until(EC.element_to_be_clickable(locator))).perform()

    def menu(self, menu: str, item: str) -> None:
        """Click `item` in the main menu bar's `menu`."""
        self.wait().until(EC.element_to_be_clickable(
            (By.XPATH, f"//li[contains(@class,'lm-MenuBar-item')][.//div[text()='{menu}']]"))).click()
        self.wait().until(EC.element_to_be_clickable(
            (By.XPATH, f"//li[contains(@class,'lm-Menu-item')][.//div[text()='{item}']]"))).click()

    def screenshot(self, name: str) -> None:
        SHOTS.mkdir(parents=True, exist_ok=True)
        path = SHOTS / f"{len(self.shots) + 1:02d}_{name}.png"
        self.driver.save_screenshot(str(path))
        self.shots.append(path)

    def quit(self) -> None:
        self.driver.quit()


@pytest.fixture(scope="module")
def lab(tmp_path_factory):
    """``make lab``'s command on a copy of the repository, with an empty home folder to check."""
    tmp_path = tmp_path_factory.mktemp("browser")
    root = tmp_path / "repo"
    for name in LAB_FILES:
        source = ROOT / name
        if source.is_dir():
            shutil.copytree(source, root / name, ignore=shutil.ignore_patterns("*.ipynb", ".ipynb_checkpoints"))
        else:
            (root / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(source, root / name)
    home = tmp_path / "home"
    home.mkdir()
    import matplotlib  # the user's font cache, or the first kernel spends ~20 s rebuilding it

    state = tmp_path / "lab-state"
    (state / "ipython").mkdir(parents=True)  # as after an earlier make lab (jupyter_core then "migrates" it)
    env = {"JUPYTER": jupyter_command(), "RLVMR_LAB_STATE": str(state), "HOME": str(home),
           "MPLCONFIGDIR": matplotlib.get_cachedir()}
    server = Lab(root, command=[str(root / "scripts" / "lab.sh")], env=env)
    try:
        yield server
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser(tmp_path_factory):
    chromium = Browser(tmp_path_factory.mktemp("chromium-profile"))
    try:
        yield chromium
    finally:
        chromium.quit()


def _code_prompts(driver) -> list[str]:
    return [p.text.strip() for p in driver.find_elements(By.CSS_SELECTOR, ".jp-CodeCell .jp-InputArea-prompt")]


def _error_outputs(driver) -> list:
    """Error and stderr outputs (JupyterLab renders a traceback as stderr)."""
    return driver.find_elements(By.CSS_SELECTOR,
                                ".jp-OutputArea-output[data-mime-type='application/vnd.jupyter.stderr']")


def open_notebook(browser: Browser, folders: tuple[str, ...], name: str):
    """Double-click through `folders` from the root, then on `name`; returns its tab once the kernel is
    idle and the notebook holds what the kernel reported about itself."""
    # waited for: when this is the session's first page (a test run alone, or first under -k), the file browser
    # is still rendering and an immediate lookup found no breadcrumbs
    browser.wait().until(EC.element_to_be_clickable((By.CSS_SELECTOR, ".jp-BreadCrumbs-home"))).click()
    for folder in folders:
        browser.double_click(_file_item(folder))
    browser.wait().until(EC.presence_of_element_located(_file_item(name)))
    browser.double_click(_file_item(name))
    browser.wait().until(EC.presence_of_element_located(_tab(name)))
    browser.wait().until(EC.presence_of_element_located(
        (By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-CodeCell")))
    browser.wait(120).until(EC.presence_of_element_located(KERNEL_IDLE))
    time.sleep(1)  # the kernel's info reply has been applied to the notebook by now
    return browser.driver.find_element(*_tab(name))


def run_all(browser: Browser, name: str) -> list:
    """Run > Run All Cells; waits until every code cell ran or one failed; returns the rendered figures."""
    driver = browser.driver
    browser.menu("Run", "Run All Cells")
    try:
        WebDriverWait(driver, RUN_ALL_TIMEOUT_S, poll_frequency=1).until(
            lambda d: "[*]:" not in _code_prompts(d) and ("[ ]:" not in _code_prompts(d) or _error_outputs(d)))
    except TimeoutException:
        browser.screenshot(f"{name}_timed_out")
        raise AssertionError(f"Run All did not finish in {RUN_ALL_TIMEOUT_S} s: {_code_prompts(driver)}") from None
    images = driver.find_elements(By.CSS_SELECTOR, ".jp-NotebookPanel:not(.lm-mod-hidden) .jp-OutputArea-output img")
    if images:
        driver.execute_script("arguments[0].scrollIntoView({block: 'start'})", images[0])
    browser.screenshot(f"{name}_ran")
    errors = _error_outputs(driver)
    assert not errors, "error output:\n" + "\n---\n".join(e.text[:800] for e in errors)
    assert len(images) >= 3, f"{len(images)} figures rendered"
    assert all(img.get_property("naturalWidth") > 100 for img in images), "a figure did not load"
    return images


def close_and_save(browser: Browser, name: str, label: str) -> None:
    """Close the tab; a run notebook has outputs to save, and most users answer Save."""
    browser.driver.find_element(*_tab(name)).find_element(By.CSS_SELECTOR, ".lm-TabBar-tabCloseIcon").click()
    save = browser.wait(10).until(EC.element_to_be_clickable(
        (By.XPATH, "//div[contains(@class,'jp-Dialog')]//button[.//div[text()='Save']]")))
    browser.screenshot(f"{label}_close_asks_to_save")
    save.click()
    browser.wait().until(EC.invisibility_of_element_located(_tab(name)))


def test_tour_opens_runs_and_closes_without_rewriting_its_source(lab, browser):
    tracked = (lab.root / "notebooks" / TOUR).read_bytes()
    browser.driver.get(f"{lab.base}/lab?reset&token={lab.token}")  # reset: the default layout, not a saved one
    browser.wait().until(EC.visibility_of_element_located(_file_item("notebooks")))
    time.sleep(0.5)  # the listing is painted
    browser.screenshot("file_browser")

    # Double-click opens the py:percent source as a notebook (the project's default viewer for .py).
    tab = open_notebook(browser, ("notebooks",), TOUR)
    browser.screenshot("tour_opened")
    assert "jp-mod-dirty" not in tab.get_attribute("class"), "opening the tour marked it unsaved"
    prompts = _code_prompts(browser.driver)
    assert len(prompts) >= 5 and all(p == "[ ]:" for p in prompts), prompts

    run_all(browser, "tour")
    close_and_save(browser, TOUR, "tour")
    browser.screenshot("tour_closed")

    assert (lab.root / "notebooks" / TOUR).read_bytes() == tracked, "JupyterLab rewrote the tracked notebook source"
    paired = lab.api("GET", "/api/contents/notebooks/00_tour.ipynb?content=1")["content"]  # git-ignored
    assert sum(len(c.get("outputs", [])) for c in paired["cells"]) > 0, "the outputs were not saved to the .ipynb"
    assert {"tour_presets.png", "tour_group_paper.png"} <= {p.name for p in (lab.root / "figures").iterdir()}
    home = lab.root.parent / "home"
    written = sorted(str(p.relative_to(home)) for p in home.rglob("*"))
    assert not written, f"make lab wrote into the home folder: {written}"
    assert sorted(p.name for p in (lab.root / ".jupyter").rglob("*")) == LAB_SETTINGS, "Jupyter wrote into .jupyter/"
    # No autosave either: a parameter typed into the tracked notebook is never written behind the user's back.
    plugin = lab.api("GET", "/lab/api/settings/@jupyterlab/docmanager-extension:plugin")
    effective = {key: plugin["settings"].get(key, spec.get("default"))
                 for key, spec in plugin["schema"]["properties"].items()}
    assert effective["autosave"] is False and effective["defaultViewers"]["python"] == "Jupytext Notebook"


def test_ci_size_run_copy_opens_runs_and_keeps_its_outputs_under_runs_lab(lab, browser):
    """The one-click fast first run: runs/lab/00_tour.ipynb, the CI parameters written into its parameters cell."""
    if not browser.driver.current_url.startswith(lab.base):
        browser.driver.get(f"{lab.base}/lab?reset&token={lab.token}")
    tab = open_notebook(browser, ("runs", "lab"), "00_tour.ipynb")
    assert "jp-mod-dirty" not in tab.get_attribute("class"), "opening the run copy marked it unsaved"
    ci_cells = browser.driver.find_elements(By.XPATH, "//div[contains(@class,'jp-CodeCell')]"
                                                      "[.//*[contains(text(),'CI-size parameters')]]")
    assert len(ci_cells) == 1, "no parameters cell with the CI-size parameters"
    browser.screenshot("run_copy_opened")
    run_all(browser, "run_copy")
    close_and_save(browser, "00_tour.ipynb", "run_copy")
    figures = lab.root / "runs" / "lab" / "figures"
    assert figures.is_dir() and {"tour_presets.png"} <= {p.name for p in figures.iterdir()}
    assert not (lab.root / "runs" / "lab" / "00_tour.py").exists(), "saving the run copy wrote a paired .py"
