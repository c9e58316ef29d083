"""One task's server for the cluster tests: TF_CONFIG says which; exits with its parent."""

import queuekit as qk

qk.exit_with_parent()
server = qk.start_server()
print("ready", flush=True)
server.join()
