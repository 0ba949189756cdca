#!/usr/bin/env python3
"""What clients of kvio serve saw against what its engine did.

Reads a client log (request,response_id,event,kind,time_ns: serve_load's
or serve_openai.mjs's; time_ns on the wall clock) and the server's results
directory (requests.csv: each request's arrival, and for kvio serve its
HTTP request's first byte and its pick-up; tokens.csv: each engine step;
summary.json: the wall time of the run's t0). The response id's first 16
hex digits after the dash are the engine's request id. Prints one JSON
object, in ms, p50/p99/max and counts:
  ttft_error_ms  client TTFT (its send to its first token event) minus
                 kvio's (arrival to the first step), per request;
  itl_error_ms   the gap between two token events minus the gap between
                 the two steps;
and where they can be placed on one clock (the run's t0 on the wall clock):
  send_to_first_byte_ms     the client's send to the server reading the
                            request's first byte;
  first_byte_to_arrival_ms  the first byte to the last (kvio's arrival);
  pickup_ms                 arrival to the serve rank taking it;
  token_to_client_ms        the engine's first step to the client's event.

usage: serve_analyze.py CLIENT_LOG RESULTS_DIR
"""
import csv
import json
import sys
from collections import defaultdict


def percentile(values, p):
    if not values:
        return float("nan")
    ordered = sorted(values)
    rank = max(0, min(len(ordered) - 1, int(round(p / 100 * len(ordered) + 0.5)) - 1))
    return ordered[rank]


def stats(values):
    return {"count": len(values), "p50": percentile(values, 50), "p99": percentile(values, 99),
            "max": max(values) if values else float("nan")}


def main():
    log_path, results = sys.argv[1], sys.argv[2]
    sends, events, ids = {}, defaultdict(list), {}
    with open(log_path) as log:
        for request, response_id, _event, kind, time_ns in csv.reader(log):
            if kind == "send":
                sends[request] = int(time_ns)
            elif kind == "token":
                events[request].append(int(time_ns))
                if response_id != "-":
                    ids[request] = int(response_id.split("-", 1)[1][:16], 16)
    rows = {}
    with open(f"{results}/requests.csv") as requests:
        for row in csv.DictReader(requests):
            rows[int(row["id"])] = row
    steps = defaultdict(list)
    with open(f"{results}/tokens.csv") as tokens:
        for row in csv.DictReader(tokens):
            steps[int(row["id"])].append(float(row["time_s"]))
    with open(f"{results}/summary.json") as summary:
        t0_ns = json.load(summary).get("t0_unix_ns")
    ttft_errors, itl_errors, unmatched = [], [], 0
    parts = defaultdict(list)
    for request, client in events.items():
        engine_id = ids.get(request)
        engine = steps.get(engine_id, [])
        row = rows.get(engine_id)
        if row is None or len(engine) != len(client) or request not in sends:
            unmatched += 1
            continue
        arrival_s = float(row["arrival_s"])
        client_ttft_ms = (client[0] - sends[request]) / 1e6
        engine_ttft_ms = (engine[0] - arrival_s) * 1e3
        ttft_errors.append(client_ttft_ms - engine_ttft_ms)
        for k in range(1, len(client)):
            itl_errors.append((client[k] - client[k - 1]) / 1e6 - (engine[k] - engine[k - 1]) * 1e3)
        if "pickup_ms" in row:
            parts["pickup_ms"].append(float(row["pickup_ms"]))
            parts["first_byte_to_arrival_ms"].append(
                (arrival_s - float(row["request_first_byte_s"])) * 1e3)
            if t0_ns is not None:
                first_byte_ns = t0_ns + float(row["request_first_byte_s"]) * 1e9
                parts["send_to_first_byte_ms"].append((first_byte_ns - sends[request]) / 1e6)
                parts["token_to_client_ms"].append((client[0] - (t0_ns + engine[0] * 1e9)) / 1e6)
    out = {"requests": len(events), "unmatched": unmatched,
           "ttft_error_ms": stats(ttft_errors), "itl_error_ms": stats(itl_errors)}
    for name, values in parts.items():
        out[name] = stats(values)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
