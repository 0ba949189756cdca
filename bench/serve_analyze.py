#!/usr/bin/env python3
"""What clients of kvio serve saw against what its engine did.

Reads a client log (request,response_id,event,kind,time_ns: serve_load's
or serve_openai.mjs's) and the server's results directory (requests.csv:
each request's arrival; tokens.csv: each engine step). The response id's
first 16 hex digits after the dash are the engine's request id. Prints one
JSON object: TTFT error (client's send to first token event, minus the
engine's arrival to first step) and ITL error (the gap between two token
events, minus the gap between the two steps), in ms, p50/p99/max, and the
counts that were matched.

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
    arrivals = {}
    with open(f"{results}/requests.csv") as requests:
        for row in csv.DictReader(requests):
            arrivals[int(row["id"])] = float(row["arrival_s"])
    steps = defaultdict(list)
    with open(f"{results}/tokens.csv") as tokens:
        for row in csv.DictReader(tokens):
            steps[int(row["id"])].append(float(row["time_s"]))
    ttft_errors, itl_errors, unmatched = [], [], 0
    for request, client in events.items():
        engine_id = ids.get(request)
        engine = steps.get(engine_id, [])
        if engine_id not in arrivals or len(engine) != len(client) or request not in sends:
            unmatched += 1
            continue
        client_ttft_ms = (client[0] - sends[request]) / 1e6
        engine_ttft_ms = (engine[0] - arrivals[engine_id]) * 1e3
        ttft_errors.append(client_ttft_ms - engine_ttft_ms)
        for k in range(1, len(client)):
            itl_errors.append((client[k] - client[k - 1]) / 1e6 - (engine[k] - engine[k - 1]) * 1e3)
    print(json.dumps({"requests": len(events), "unmatched": unmatched,
                      "ttft_error_ms": stats(ttft_errors), "itl_error_ms": stats(itl_errors)}))


if __name__ == "__main__":
    main()
