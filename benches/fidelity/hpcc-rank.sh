#!/bin/sh
# One rank of Debian's hpcc (HPC Challenge) for the fidelity matrix. hpcc exits at once, doing
# nothing, when its output file hpccoutf.txt already exists, so the first rank removes the previous
# run's before starting (only rank 0 reads hpccinf.txt and writes the output).
if [ "${OMPI_COMM_WORLD_RANK:-${PMI_RANK:-0}}" = 0 ]; then rm -f hpccoutf.txt; fi
exec hpcc "$@"
