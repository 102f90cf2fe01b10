#!/bin/bash
# One rank of a FlagCX perf test, started by mpirun (launch: mpi): runs $FLAGCX_HOME/test/perf/test_$FLAGCX_TEST
# with $FLAGCX_ARGS in its own folder (FlagCX links its tests with the run path ../../build/lib). Rank 0 first
# names the test, so that flagperf knows which operation the result lines that follow measure.
test_name=${FLAGCX_TEST:-allreduce}
case $test_name in
  ''|*[!a-z0-9_]*) echo "flagcx_perf: FLAGCX_TEST must name a FlagCX perf test (allreduce, sendrecv, ...), got '$test_name'" >&2
     exit 2;;
esac
if [ -z "${FLAGCX_HOME:-}" ]; then
  echo "flagcx_perf: FLAGCX_HOME is not set: set it in the case config's env to the FlagCX checkout built on every host" >&2
  exit 2
fi
binary=$FLAGCX_HOME/test/perf/test_$test_name
if [ ! -x "$binary" ]; then
  echo "flagcx_perf: $binary is missing on ${HOSTNAME:-this host}: build FlagCX's perf tests (cd \$FLAGCX_HOME/test/perf && make) on every host" >&2
  exit 2
fi
read -r -a args <<< "${FLAGCX_ARGS:--b 128K -e 4G -f 2}"
export LD_LIBRARY_PATH="$FLAGCX_HOME/build/lib${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
if [ "${RANK:-0}" = 0 ]; then
  echo "FlagCX perf test: test_$test_name ${args[*]}"
fi
cd "$FLAGCX_HOME/test/perf" && exec "$binary" "${args[@]}"
