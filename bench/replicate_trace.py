#!/usr/bin/env python3
"""Writes a Mooncake trace replicated N times: each copy's timestamps and
hash ids are offset past the previous copy's, so copies share no blocks.
usage: replicate_trace.py SOURCE TARGET COPIES (bench/cachesim.sh, simulate.sh)"""
import json
import sys

source, target, copies = sys.argv[1], sys.argv[2], int(sys.argv[3])
requests = [json.loads(line) for line in open(source) if line.strip()]
id_span = 1 + max((max(r["hash_ids"]) for r in requests if r["hash_ids"]), default=0)
time_span = 1 + max(r["timestamp"] for r in requests)
with open(target, "w") as out:
    for copy in range(copies):
        for r in requests:
            row = dict(r)
            row["timestamp"] = r["timestamp"] + copy * time_span
            row["hash_ids"] = [x + copy * id_span for x in r["hash_ids"]]
            out.write(json.dumps(row) + "\n")
