"""tnwgd under the node id in $PINNED_NODE_ID, for tests of two routers that have one.

A router draws its node id at random when it starts (router.routing.topology.new_node_id), so a
clash cannot be configured; this entry point stands in for the draw and runs the real daemon."""
import os
import runpy

import router.supervisor

router.supervisor.new_node_id = lambda: int(os.environ["PINNED_NODE_ID"], 0)
runpy.run_module("router.cli.tnwgd", run_name="__main__", alter_sys=True)
