"""A worker process of the cluster tests: its own server (``TF_CONFIG``), a non-chief session
on a work queue. Prints each batch's ids as a JSON line; with ``hold`` it then waits for stdin
(the test kills it there, its files taken and its queues full)."""

import json
import sys

import queuekit as qk
from tests.cluster_jobs import work_batches, worker_graph

qk.exit_with_parent()
args = json.loads(sys.argv[1])
task = qk.cluster_from_env()
server = qk.start_server(task)
graph, batch, count = worker_graph(task.spec, task.task, args["scope"], lambda: work_batches(
    args["files"], args["name"], **args.get("options", {})))
with qk.QueueSession(graph, target=server.target, is_chief=False, stall_timeout_secs=30) as qs:
    for x, _ in qs.iterate([batch, count]):
        print(json.dumps(x["id"].tolist()), flush=True)
        if args.get("hold"):
            sys.stdin.readline()
print("end", flush=True)
