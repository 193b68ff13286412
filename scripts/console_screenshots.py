"""Drives headless Chromium through chromedriver's W3C API (no client library needed): logs in
through the outbox's magic link, then saves a desk and a phone screenshot of each page.
Usage (see console-screenshots.sh): URL SQLITE_FILE OUT_DIR WORKSPACE_ID [name=/path ...]"""
import json, urllib.request, base64, subprocess, sys, time, re, os
url, db, outdir = sys.argv[1], sys.argv[2], sys.argv[3]
def req(method, u, body=None, headers={}):
    data = json.dumps(body).encode() if body is not None else None
    r = urllib.request.Request(u, data=data, method=method, headers={"Content-Type": "application/json", **headers})
    with urllib.request.urlopen(r) as f:
        return json.loads(f.read() or b"null")
def acp(*args):
    return subprocess.run(["target/debug/acp", *args], env={**os.environ, "ACP_DATABASE_URL": "sqlite:"+db}, capture_output=True, text=True).stdout
ws = sys.argv[4]
acp("workspace", "add-member", "--workspace", ws, "--email", "owner@example.com", "--role", "owner")
req("POST", url+"/auth/start-login", {"email": "owner@example.com"})
out = acp("outbox", "list", "--limit", "1", "--output", "json")
link = re.search(r'http[^"]*verify-login\?token=[A-Za-z0-9_-]+', out).group(0)
import socket
with socket.socket() as free:
    free.bind(("127.0.0.1", 0))
    port = free.getsockname()[1]
drv = subprocess.Popen(["chromedriver", f"--port={port}"], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
for _ in range(50):
    try:
        req("GET", f"http://127.0.0.1:{port}/status")
        break
    except OSError:
        time.sleep(0.1)
try:
    s = req("POST", f"http://127.0.0.1:{port}/session", {"capabilities": {"alwaysMatch": {"browserName": "chrome", "goog:chromeOptions": {"binary": "/usr/bin/chromium", "args": ["--headless=new", "--no-sandbox", "--disable-gpu", "--window-size=1280,1000"]}}}})
    sid = s["value"]["sessionId"]
    base = f"http://127.0.0.1:{port}/session/{sid}"
    req("POST", base+"/url", {"url": link})
    pages = [("overview", "/dashboard"), ("agents", "/dashboard/agents")] + [(n, p) for n, p in [tuple(a.split("=",1)) for a in sys.argv[5:]]]
    for name, path in pages:
        for w, h, suffix in [(1280, 1000, ""), (390, 900, "-phone")]:
            req("POST", base+"/window/rect", {"width": w, "height": h})
            req("POST", base+"/url", {"url": url+path})
            time.sleep(0.3)
            png = req("GET", base+"/screenshot")["value"]
            open(f"{outdir}/{name}{suffix}.png", "wb").write(base64.b64decode(png))
    req("DELETE", base)
finally:
    drv.kill()
