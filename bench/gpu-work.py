#!/usr/bin/env python3
"""`oomlens-runner work` on the GPU machine, against a stand-in for the server's runner API.

The GPU machine has no PostgreSQL, so the real server cannot run there; its side of the
protocol (leases, expiry, re-leasing a killed runner's job, 409s) is tested against the real
server in tests/e2e/runner_api.rs. This script checks the runner's side on a real GPU: it
registers with its device, leases the job, downloads the snapshot, heartbeats while the GPU
replays it (a 1 s heartbeat against a replay of several seconds), and posts a result equal to
`oomlens-runner replay --json` for the same job.

    bench/gpu-work.py RUNNER SNAPSHOT CAPACITY_BYTES [REMEDY...]

Prints one line per check; exit 1 if one failed.
"""
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

runner, snapshot, capacity = sys.argv[1], sys.argv[2], int(sys.argv[3])
remedies = sys.argv[4:]
data = open(snapshot, "rb").read()
seen = {"register": None, "leases": 0, "downloads": 0, "heartbeats": 0, "result": None, "trace": None,
        "auth": set()}
RUNNER_ID = "00000000-0000-4000-8000-000000000001"


class Api(BaseHTTPRequestHandler):
    def log_message(self, *a):
        pass

    def answer(self, status, body=None, raw=None):
        payload = raw if raw is not None else (json.dumps(body).encode() if body is not None else b"")
        self.send_response(status)
        self.send_header("Content-Type", "application/octet-stream" if raw is not None else "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def body(self):
        n = int(self.headers.get("Content-Length", 0))
        return json.loads(self.rfile.read(n) or b"{}")

    def do_POST(self):
        seen["auth"].add(self.headers.get("Authorization"))
        base = f"http://127.0.0.1:{self.server.server_port}"
        if self.path == "/api/v1/runner/register":
            seen["register"] = self.body()
            return self.answer(201, {"runner_id": RUNNER_ID, "lease_seconds": 4, "heartbeat_seconds": 1})
        if self.path == "/api/v1/runner/lease":
            self.body()
            seen["leases"] += 1
            if seen["leases"] > 1:
                return self.answer(204)
            return self.answer(200, {
                "job_id": 1, "replay_id": "00000000-0000-4000-8000-000000000002",
                "snapshot_id": "00000000-0000-4000-8000-000000000003",
                "snapshot_name": snapshot.rsplit("/", 1)[-1], "snapshot_size_bytes": len(data),
                "snapshot_url": f"{base}/api/v1/runner/jobs/1/snapshot?runner_id={RUNNER_ID}",
                "capacity_bytes": capacity, "device_memory_bytes": None, "alloc_conf": None,
                "remedies": remedies, "lease_expires_at": "2099-01-01T00:00:00Z", "attempt": 1})
        if self.path == "/api/v1/runner/jobs/1/heartbeat":
            self.body()
            seen["heartbeats"] += 1
            return self.answer(200, {"lease_expires_at": "2099-01-01T00:00:00Z"})
        if self.path == "/api/v1/runner/jobs/1/result":
            seen["result"] = self.body()
            return self.answer(200, {})
        self.answer(404, {"error": f"no {self.path}"})

    def do_PUT(self):
        seen["auth"].add(self.headers.get("Authorization"))
        if self.path.startswith("/api/v1/runner/jobs/1/trace"):
            n = int(self.headers.get("Content-Length", 0))
            seen["trace"] = self.rfile.read(n)
            return self.answer(204)
        self.answer(404, {"error": f"no {self.path}"})

    def do_GET(self):
        seen["auth"].add(self.headers.get("Authorization"))
        if self.path.startswith("/api/v1/runner/jobs/1/snapshot"):
            seen["downloads"] += 1
            return self.answer(200, raw=data)
        self.answer(404, {"error": f"no {self.path}"})


srv = ThreadingHTTPServer(("127.0.0.1", 0), Api)
threading.Thread(target=srv.serve_forever, daemon=True).start()
url = f"http://127.0.0.1:{srv.server_port}"
p = subprocess.run([runner, "work", "--server", url, "--token", "t0ken", "--once", "--wait", "5"],
                   capture_output=True, text=True, timeout=600)
srv.shutdown()
direct = subprocess.run(
    [runner, "replay", snapshot, "--capacity", str(capacity), "--json"] + sum((["--remedy", r] for r in remedies), []),
    capture_output=True, text=True, timeout=600)
want = json.loads(direct.stdout) if direct.stdout.strip() else {}

fails = []
def check(what, ok):
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        fails.append(what)

check(f"work exits 0 (exit {p.returncode}; {p.stderr.strip().splitlines()[-1] if p.stderr.strip() else ''})", p.returncode == 0)
reg = seen["register"] or {}
check(f"registered with its device: {reg.get('device', {}).get('name')}", bool(reg.get("device", {}).get("name")))
check("the token was sent on every call", seen["auth"] == {"Bearer t0ken"})
check(f"one job leased, its snapshot downloaded once ({seen['downloads']})", seen["downloads"] == 1)
res = (seen["result"] or {}).get("result")
check("a result was posted" + ("" if res else f": {seen['result']}"), bool(res))
if res:
    wall = res.get("wall_ms", 0) + sum(r.get("wall_ms", 0) for r in res.get("remedies", []))
    check(f"heartbeats while the GPU replayed ({seen['heartbeats']} in {wall / 1000:.1f} s of replays)",
          seen["heartbeats"] >= max(0, int(wall / 1000) - 1))
    for key in ("oom", "oom_event_index", "peak_allocated_bytes", "peak_reserved_bytes", "stamp_errors", "entries_replayed"):
        check(f"{key}: {res.get(key)} as `replay --json` ({want.get(key)})", res.get(key) == want.get(key))
    for a, b in zip(res.get("remedies", []), want.get("remedies", [])):
        check(f"remedy {a['remedy']}: fits {a['fits']} as `replay --json` ({b['fits']})", a["fits"] == b["fits"])
trace = seen["trace"] or b""
plain = b""
if trace[:2] == b"\x1f\x8b":
    import gzip
    plain = gzip.decompress(trace)
check(f"the GPU replay's trace uploaded before the result: {len(trace)} bytes gzip, {len(plain)} unpacked, "
      f"a protocol-4 pickle", plain[:2] == b"\x80\x04")
if plain:
    import pickle
    # Our own runner's output, read with Python's pickle to show memory_viz can load it.
    snap = pickle.loads(plain)
    entries = snap["device_traces"][0] if snap.get("device_traces") else []
    allocs = sum(1 for e in entries if e["action"] == "alloc")
    check(f"the trace reads with Python's pickle: {len(snap.get('segments', []))} segments, {len(entries)} trace "
          f"entries, {allocs} allocs", len(entries) > 0)
sys.exit(1 if fails else 0)
