"""Rank 1 exits (as on an error) while rank 0 waits in a collective: rank 1 must still exit, so
torchrun sees it gone and the job ends, instead of both waiting for gloo's 30-minute timeout."""

import sys

import torch

from polyrl_torch import distributed

distributed.init_from_env(torch.device("cpu"))
distributed.EXIT_BARRIER_S = 2  # the exit barrier's wait, short for the test
if distributed.rank() == 1:
    sys.exit(3)
distributed.all_gather_objects("rank 0 waits here for a peer that left")
