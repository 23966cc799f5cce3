"""The operator console in a real browser: Debian's headless Chromium, driven through
WebDriver (Selenium and Debian's chromedriver). Run by scripts/console-browser.sh, which
starts the servers and makes the held changes; this file only uses the browser and reads the
subscription service to check what changed.

python console.py --console URL --short URL --service URL [--screenshots DIR]
python console.py --approve-held --console URL --service URL --rasa URL

The second form is scripts/rasa-e2e.sh's: a real Rasa conversation left one change held;
the operator approves it in the browser, the service makes it once, and Rasa's tracker of
that conversation shows the decision's intent followed by the check's `applied`.
"""

import argparse
import http.server
import json
import socketserver
import sys
import tempfile
import threading
import time
import urllib.parse
import urllib.request

from selenium import webdriver
from selenium.webdriver.chrome.options import Options
from selenium.webdriver.chrome.service import Service
from selenium.webdriver.common.by import By

OPERATOR, PASSWORD = "ana", "correct horse battery"
WINE = "WS-SUB-7001"

results = []


def check(name, ok, detail=""):
    results.append((name, bool(ok)))
    print(("ok     " if ok else "FAILED ") + name + ("" if ok or not detail else f": {detail}"))


def record(service):
    with urllib.request.urlopen(f"{service}/v1/subscriptions/{WINE}") as r:
        return json.load(r)


def browser(width=1280, height=1000):
    options = Options()
    options.binary_location = "/usr/bin/chromium"
    for flag in ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
                 "--disable-background-networking", "--disable-component-update", "--disable-sync",
                 "--disable-dev-shm-usage", f"--user-data-dir={tempfile.mkdtemp()}",
                 f"--window-size={width},{height}"]:
        options.add_argument(flag)
    return webdriver.Chrome(service=Service("/usr/bin/chromedriver"), options=options)


def sign_in(driver, console, password=PASSWORD):
    driver.get(f"{console}/sign-in")
    driver.find_element(By.NAME, "name").send_keys(OPERATOR)
    driver.find_element(By.NAME, "password").send_keys(password)
    driver.find_element(By.CSS_SELECTOR, "form button[type=submit]").click()


def held_section(driver, sender):
    for section in driver.find_elements(By.CSS_SELECTOR, "section.card"):
        links = section.find_elements(By.CSS_SELECTOR, f"a[href='/conversations/{sender}']")
        if links:
            return section
    return None


def body(driver):
    return driver.find_element(By.TAG_NAME, "body").text


def after_click(driver, *phrases, timeout=10):
    """The page's text once one of the phrases is on it (or the time is up)."""
    deadline = time.time() + timeout
    while True:
        try:
            text = body(driver)
        except Exception:
            text = ""
        if any(p in text for p in phrases) or time.time() > deadline:
            return text
        time.sleep(0.05)


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--console", required=True)
    p.add_argument("--short", help="a console whose sessions last seconds")
    p.add_argument("--service", required=True)
    p.add_argument("--screenshots")
    p.add_argument("--approve-held", action="store_true")
    p.add_argument("--rasa")
    a = p.parse_args()
    if a.approve_held:
        approve_held(a)
        return
    driver = browser()
    try:
        # Without a session every page sends the operator to sign in.
        driver.get(f"{a.console}/operations")
        check("without a session, a page redirects to sign-in", driver.current_url.endswith("/sign-in"), driver.current_url)
        sign_in(driver, a.console, "wrong")
        text = after_click(driver, "do not match")
        check("a wrong password is refused", "do not match" in text, text[:200])
        sign_in(driver, a.console)
        text = after_click(driver, "Held changes")
        check("signed in, the held changes are shown", "Held changes" in text and WINE in text, text[:300])
        first = held_section(driver, "browser-1")
        check("the held change shows the question as sent, the reply and the terms",
              first is not None and "40 EUR" in first.text and "They replied:" in first.text and "acct-21" in first.text,
              first.text if first else "no section")
        if a.screenshots:
            driver.save_screenshot(f"{a.screenshots}/console-held.png")
        # A form stripped of its token is refused, and nothing is sent.
        driver.execute_script(
            "document.querySelectorAll('form[action$=\"/approve\"] input[name=csrf]').forEach(e => e.remove())")
        held_section(driver, "browser-1").find_element(By.NAME, "approve").click()
        text = after_click(driver, "not from your session")
        check("a form without the session's token is refused", "not from your session" in text, text[:200])
        check("... and nothing was sent", record(a.service)["revision"] == 3)
        # A form sent from another origin is refused.
        driver.get(f"{a.console}/")
        target = f"{a.console}" + held_section_action(driver, a.console, "browser-2", "reject")
        page = ("<html><body><form id=f method=post action='%s'><input name=csrf value=x>"
                "<input name=note value=forged></form><script>document.getElementById('f').submit()</script>"
                "</body></html>") % target
        with serve_page(page) as origin:
            driver.get(origin)
            refused = after_click(driver, "another site", "sign in first")
        check("a form from another origin is refused", "another site" in refused or "sign in first" in refused, refused[:200])
        driver.get(f"{a.console}/")
        check("... and the held change is still held", held_section(driver, "browser-2") is not None)
        # Approved with a note: the change is made once, at the service.
        section = held_section(driver, "browser-1")
        section.find_element(By.CSS_SELECTOR, "form[action$='/approve'] input[name=note]").send_keys("Checked with the customer by phone")
        section.find_element(By.NAME, "approve").click()
        text = after_click(driver, "Approved")
        check("approving says the change was applied", "Approved: applied" in text, text[:300])
        after = record(a.service)
        check("the service made the change, once", after["revision"] == 4 and "cancel_now" in after["notes"][-1]["text"], json.dumps(after)[:300])
        driver.get(f"{a.console}/conversations/browser-1")
        text = body(driver)
        check("the timeline shows the question, the outcome and who decided",
              "approve_subscription_change" in text and OPERATOR in text and "applied" in text, text[:400])
        if a.screenshots:
            driver.save_screenshot(f"{a.screenshots}/console-timeline.png")
        # The second hold, approved now, finds the facts moved: nothing is sent.
        driver.get(f"{a.console}/")
        held_section(driver, "browser-2").find_element(By.NAME, "approve").click()
        text = after_click(driver, "benefit loss hidden", "Approved")
        check("an operator cannot approve a hold whose terms moved", "benefit loss hidden" in text, text[:300])
        check("... and nothing more was sent", record(a.service)["revision"] == 4)
        # On a phone: the page fits the screen.
        driver.set_window_size(390, 844)
        driver.get(f"{a.console}/operations?account=acct-21")
        fits = driver.execute_script("return document.documentElement.scrollWidth <= window.innerWidth + 1")
        check("the operations page fits a phone's width", fits)
        if a.screenshots:
            driver.save_screenshot(f"{a.screenshots}/console-phone.png")
        driver.set_window_size(1280, 1000)
        # Signed out: the pages need a sign-in again.
        driver.get(f"{a.console}/")
        driver.find_element(By.CSS_SELECTOR, "header form button").click()
        after_click(driver, "Sign in")
        driver.get(f"{a.console}/")
        check("after signing out, pages redirect to sign-in", driver.current_url.endswith("/sign-in"), driver.current_url)
    finally:
        driver.quit()
    # A session that expires.
    short = browser()
    try:
        sign_in(short, a.short)
        check("signed in on the short-session console", "Held changes" in after_click(short, "Held changes"))
        time.sleep(4)
        short.get(f"{a.short}/")
        check("an expired session redirects to sign-in", short.current_url.endswith("/sign-in"), short.current_url)
    finally:
        short.quit()
    failed = sum(1 for _, ok in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def tracker(rasa, sender):
    with urllib.request.urlopen(f"{rasa}/conversations/{urllib.parse.quote(sender, safe='')}/tracker") as r:
        return json.load(r)


def approve_held(a):
    """Approves the one held change a real Rasa conversation left; checks the service and
    Rasa's tracker."""
    driver = browser()
    try:
        sign_in(driver, a.console)
        after_click(driver, "Held changes")
        sections = driver.find_elements(By.CSS_SELECTOR, "section.card")
        link = sections[0].find_elements(By.CSS_SELECTOR, "a[href*='/conversations/']") if sections else []
        check("the conversation's held change is in the console", len(sections) == 1 and link, body(driver)[:300])
        if not link:
            return finish()
        sender = urllib.parse.unquote(link[0].get_attribute("href").split("/conversations/", 1)[1])
        before = record(a.service)
        check("... and nothing changed at the service yet", before["revision"] == 3 and before["status"] == "active")
        sections[0].find_element(By.NAME, "approve").click()
        text = after_click(driver, "Approved")
        check("approved in the browser: applied", "Approved: applied" in text, text[:300])
        after = record(a.service)
        check("the service made the change, once", after["revision"] == 4, json.dumps(after)[:200])
        deadline = time.time() + 20
        heard = False
        while time.time() < deadline and not heard:
            events = tracker(a.rasa, sender)["events"]
            intents = [i for i, e in enumerate(events)
                       if e.get("event") == "user"
                       and (e.get("parse_data") or {}).get("intent", {}).get("name") == "subscription_change_decided"]
            heard = bool(intents) and any(
                e.get("event") == "slot" and e.get("name") == "change_status" and e.get("value") == "applied"
                for e in events[intents[-1]:])
            if not heard:
                time.sleep(0.25)
        events = tracker(a.rasa, sender)["events"]
        check("Rasa heard the decision and told the customer it was applied", heard,
              json.dumps([{k: e.get(k) for k in ("event", "name", "value", "text")} for e in events[-12:]]))
    finally:
        driver.quit()
    finish()


def finish():
    failed = sum(1 for _, ok in results if not ok)
    print(f"{len(results) - failed} passed, {failed} failed")
    sys.exit(1 if failed else 0)


def held_section_action(driver, console, sender, what):
    section = held_section(driver, sender)
    form = section.find_element(By.CSS_SELECTOR, f"form[action$='/{what}']")
    return form.get_attribute("action").replace(console, "")


class serve_page:
    """A page on another origin (a free port on 127.0.0.1), for the cross-origin form."""

    def __init__(self, page):
        self.page = page.encode()

    def __enter__(self):
        page = self.page

        class Handler(http.server.BaseHTTPRequestHandler):
            def do_GET(self):
                self.send_response(200)
                self.send_header("Content-Type", "text/html")
                self.end_headers()
                self.wfile.write(page)

            def log_message(self, *args):
                pass

        self.server = socketserver.TCPServer(("127.0.0.1", 0), Handler)
        threading.Thread(target=self.server.serve_forever, daemon=True).start()
        return f"http://127.0.0.1:{self.server.server_address[1]}/"

    def __exit__(self, *exc):
        self.server.shutdown()
        self.server.server_close()


if __name__ == "__main__":
    main()
