#!/usr/bin/env python3
"""Shows with PyMongo that the failpoint proxy speaks mongod 4.4+'s streaming monitoring
protocol (Server Monitoring spec): PyMongo's monitors stream (awaited heartbeats) from a
standalone and from every replica-set member, a failCommand on hello for the monitor's
appName fails an awaited heartbeat, and after replSetFreeze/replSetStepDown (as the SDAM spec
test rediscover-quickly-after-step-down runs them) PyMongo with heartbeatFrequencyMS=60000
sees the new primary within a few seconds without running any operation: only a streamed
hello can have told it.

Env: PROXY_URI (a standalone proxy, directConnection), PROXY_RS_SEED (host:port of a
replica-set proxy's first member; the set is rs0) and PROXY_RS_SECONDARY (host:port of its
second member). Prints figures; exits non-zero on any mismatch.
"""

import os
import sys
import threading
import time

import pymongo
from pymongo import monitoring

FAILURES = []


def check(cond, what):
    print(("ok   " if cond else "FAIL ") + what)
    if not cond:
        FAILURES.append(what)


class Heartbeats(monitoring.ServerHeartbeatListener):
    def __init__(self):
        self.lock = threading.Lock()
        self.events = []  # (time, kind, address, awaited, reply or error)

    def _add(self, kind, event, detail=None):
        with self.lock:
            self.events.append((time.monotonic(), kind, event.connection_id, event.awaited, detail))

    def started(self, event):
        self._add("started", event)

    def succeeded(self, event):
        self._add("succeeded", event, event.reply.document)

    def failed(self, event):
        self._add("failed", event, event.reply)

    def snapshot(self):
        with self.lock:
            return list(self.events)


def wait_for(what, timeout):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        got = what()
        if got:
            return got
        time.sleep(0.05)
    return what()


def addr(hostport):
    host, port = hostport.rsplit(":", 1)
    return (host, int(port))


# --- standalone: PyMongo streams; a fail point on hello fails an awaited heartbeat -------
listener = Heartbeats()
standalone = pymongo.MongoClient(
    os.environ["PROXY_URI"], heartbeatFrequencyMS=500, serverMonitoringMode="stream",
    appName="streamcheck", event_listeners=[listener], serverSelectionTimeoutMS=10000)
standalone.admin.command("ping")
t0 = time.monotonic()
awaited = wait_for(lambda: [e for e in listener.snapshot()
                            if e[1] == "succeeded" and e[3]][3:], 10)
events = listener.snapshot()
ok_awaited = [e for e in events if e[1] == "succeeded" and e[3]]
print(f"     standalone: {len(ok_awaited)} awaited heartbeats succeeded in "
      f"{time.monotonic() - t0:.2f} s (heartbeatFrequencyMS 500)")
check(len(ok_awaited) >= 3, "PyMongo streams from the standalone (awaited=True heartbeats)")
check("topologyVersion" in ok_awaited[0][4] if ok_awaited else False,
      "streamed replies carry topologyVersion")
gaps = [b[0] - a[0] for a, b in zip(ok_awaited, ok_awaited[1:])]
if gaps:
    print(f"     gaps between streamed replies: {', '.join(f'{g:.2f}' for g in gaps[:6])} s")
    check(all(0.3 < g < 3.0 for g in gaps[:6]),
          "each streamed reply waited about maxAwaitTimeMS (500 ms)")
check(not [e for e in events if e[1] == "failed"], "no heartbeat failed")

admin = pymongo.MongoClient(os.environ["PROXY_URI"], serverSelectionTimeoutMS=10000)
before = len(listener.snapshot())
t_set = time.monotonic()
admin.admin.command({"configureFailPoint": "failCommand", "mode": "alwaysOn",
                     "data": {"failCommands": ["hello", "isMaster"], "appName": "streamcheck",
                              "closeConnection": True}})
failed = wait_for(lambda: [e for e in listener.snapshot()[before:]
                           if e[1] == "failed" and e[3]], 5)
admin.admin.command({"configureFailPoint": "failCommand", "mode": "off"})
check(bool(failed), "closeConnection on the monitor's hello fails an awaited heartbeat")
if failed:
    print(f"     awaited heartbeat failed {1000 * (failed[0][0] - t_set):.0f} ms after the"
          f" fail point was set: {type(failed[0][4]).__name__}")
after_off = len(listener.snapshot())
recovered = wait_for(lambda: [e for e in listener.snapshot()[after_off:]
                              if e[1] == "succeeded" and e[3]], 10)
check(bool(recovered), "PyMongo streams again once the fail point is off")
standalone.close()
admin.close()

# --- replica set: streaming from every member; a step-down seen within seconds ----------
seed = os.environ["PROXY_RS_SEED"]
secondary = os.environ["PROXY_RS_SECONDARY"]
listener = Heartbeats()
rs = pymongo.MongoClient(
    f"mongodb://{seed}/?replicaSet=rs0", heartbeatFrequencyMS=60000,
    serverMonitoringMode="stream", event_listeners=[listener], serverSelectionTimeoutMS=10000)
rs.t.c.insert_one({"before": True})
members = {addr(seed), addr(secondary)}
old_primary = rs.primary
check(old_primary == addr(seed), f"the first member is primary: {old_primary}")
streaming = wait_for(lambda: {e[2] for e in listener.snapshot()
                              if e[1] == "started" and e[3]} >= members, 10)
check(bool(streaming), "every member's monitor awaits a streamed hello (awaited=True)")

direct_secondary = pymongo.MongoClient(f"mongodb://{secondary}/?directConnection=true")
direct_secondary.admin.command({"replSetFreeze": 0})
mark = len(listener.snapshot())
t0 = time.monotonic()
rs.admin.command({"replSetStepDown": 30, "secondaryCatchUpPeriodSecs": 30, "force": False})
# No operation runs from here: only the monitors can tell PyMongo of the new primary.
new_primary = wait_for(lambda: rs.topology_description.server_descriptions()
                       [addr(secondary)].server_type_name == "RSPrimary" and
                       rs.topology_description.server_descriptions()
                       [addr(seed)].server_type_name == "RSSecondary", 10)
took = time.monotonic() - t0
print(f"     PyMongo saw the new primary {1000 * took:.0f} ms after replSetStepDown was sent "
      f"(heartbeatFrequencyMS 60000)")
check(new_primary and took < 5, "PyMongo finds the new primary within a few seconds")
told = [e for e in listener.snapshot()[mark:] if e[1] == "succeeded" and e[3]]
check(any(e[2] == addr(secondary) and e[4].get("isWritablePrimary") for e in told),
      "an awaited heartbeat from the new primary told it")
counters = sorted({(e[2][1], e[4]["topologyVersion"]["counter"]) for e in told})
print(f"     streamed replies after the step-down (port, counter): {counters}")
rs.t.c.insert_one({"after": True})
check(rs.t.c.count_documents({"after": True}) >= 1, "writes go to the new primary")
check(not [e for e in listener.snapshot() if e[1] == "failed"], "no heartbeat failed")
direct_secondary.close()
rs.close()

if FAILURES:
    print(f"{len(FAILURES)} mismatch(es)")
    sys.exit(1)
print("all streaming checks passed")
