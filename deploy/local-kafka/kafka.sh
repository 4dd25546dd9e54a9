#!/usr/bin/env bash
# Single-node Apache Kafka broker (KRaft, broker+controller in one JVM) for
# local development and tests, without Docker. Jars come from Maven Central
# via the throwaway pom.xml next to this script (cached in ~/.m2).
#
#   deploy/local-kafka/kafka.sh start | stop [--clean] | clean | status | logs
#
# Environment:
#   KAFKA_PORT              client (PLAINTEXT) port on 127.0.0.1     [9092]
#   KAFKA_CONTROLLER_PORT   KRaft controller port                    [KAFKA_PORT+1]
#   KAFKA_WORK_DIR          data, server.properties, kafka.log, pid  [<here>/run/<port>]
#   KAFKA_JARS_DIR          resolved broker jars                     [<here>/jars]
#   KAFKA_START_TIMEOUT     seconds to wait for the broker to answer [90]
#   KAFKA_STOP_TIMEOUT      seconds to wait after SIGTERM before KILL [30]
#   KAFKA_HEAP_OPTS         JVM heap flags                           [-Xms256m -Xmx512m]
#   KAFKA_JVM_OPTS          extra JVM flags                          []
#   KAFKA_EXTRA_PROPERTIES  extra server.properties lines (newline separated;
#                           a key given again overrides the generated one)
#   KAFKA_FORMAT_ARGS       extra StorageTool format arguments, used when the
#                           data dir is first formatted, e.g. SCRAM users:
#                           --add-scram SCRAM-SHA-512=[name=u,password=p]
#   KAFKA_CLEAN=1           make `stop` also delete the work dir
#   JAVA, MVN               java / mvn executables                   [java, mvn]
#
# Exit status: 0 ok / running; 1 error; 2 usage; `status`: 3 not running,
# 1 process alive but the port does not answer.
set -euo pipefail

SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOST=127.0.0.1
PORT="${KAFKA_PORT:-9092}"
if ! [[ "$PORT" =~ ^[0-9]+$ ]]; then
    echo "kafka.sh: ERROR: KAFKA_PORT=$PORT is not a port number" >&2
    exit 1
fi
CPORT="${KAFKA_CONTROLLER_PORT:-$((10#$PORT + 1))}"
WORK_DIR="$(realpath -m -- "${KAFKA_WORK_DIR:-$SCRIPT_DIR/run/$PORT}")"
JARS_DIR="$(realpath -m -- "${KAFKA_JARS_DIR:-$SCRIPT_DIR/jars}")"
START_TIMEOUT="${KAFKA_START_TIMEOUT:-90}"
STOP_TIMEOUT="${KAFKA_STOP_TIMEOUT:-30}"
HEAP_OPTS="${KAFKA_HEAP_OPTS:--Xms256m -Xmx512m}"
JVM_OPTS="${KAFKA_JVM_OPTS:-}"
JAVA="${JAVA:-java}"
MVN="${MVN:-mvn}"

POM="$SCRIPT_DIR/pom.xml"
LOG4J="$SCRIPT_DIR/log4j.properties"
DATA_DIR="$WORK_DIR/data"
PROPS="$WORK_DIR/server.properties"
LOG_FILE="$WORK_DIR/kafka.log"
PID_FILE="$WORK_DIR/kafka.pid"
MARKER="$WORK_DIR/.privstream-local-kafka"

say() { printf 'kafka.sh[%s]: %s\n' "$PORT" "$*"; }
die() { printf 'kafka.sh[%s]: ERROR: %s\n' "$PORT" "$*" >&2; exit 1; }

usage() {
    sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2
    exit 2
}

is_port() { [[ "$1" =~ ^[0-9]+$ ]] && ((10#$1 > 0 && 10#$1 < 65536)); }
is_port "$PORT" || die "KAFKA_PORT=$PORT is not a port number"
is_port "$CPORT" || die "KAFKA_CONTROLLER_PORT=$CPORT is not a port number"
[[ "$PORT" != "$CPORT" ]] || die "KAFKA_PORT and KAFKA_CONTROLLER_PORT must differ"

kafka_version() {
    sed -n 's:.*<kafka.version>\(.*\)</kafka.version>.*:\1:p' "$POM" | head -n 1
}

# TCP connect to 127.0.0.1:$1 succeeds (something listens there).
port_answers() {
    timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null
}

# Pid from the pid file if that process is alive and is our broker
# (guards against a stale pid file whose pid got reused).
running_pid() {
    local pid
    [[ -f "$PID_FILE" ]] || return 1
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] || return 1
    kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$PROPS" || return 1
    echo "$pid"
}

log_tail() {
    if [[ -f "$LOG_FILE" ]]; then
        echo "----- last 40 lines of $LOG_FILE -----" >&2
        tail -n 40 "$LOG_FILE" >&2 || true
        echo "-----" >&2
    fi
}

# Resolve the broker jars with Maven unless the jar dir already holds this
# pom's Kafka version. Resolves into a temp dir and renames it into place,
# under a lock, so concurrent starts never see a half-filled jar dir.
ensure_jars() {
    local version tmp lock out
    version="$(kafka_version)"
    [[ -n "$version" ]] || die "cannot read <kafka.version> from $POM"
    [[ -f "$JARS_DIR/kafka_2.13-$version.jar" ]] && return 0
    mkdir -p "$(dirname "$JARS_DIR")"
    lock="$JARS_DIR.lock"
    exec 9>"$lock"
    flock 9
    if [[ ! -f "$JARS_DIR/kafka_2.13-$version.jar" ]]; then
        command -v "$MVN" >/dev/null || die "jars missing in $JARS_DIR and '$MVN' not found"
        # the dir gets replaced: never do that to a dir holding anything but jars
        if [[ -d "$JARS_DIR" ]] && [[ -n "$(find "$JARS_DIR" -mindepth 1 ! -name '*.jar' -print -quit)" ]]; then
            die "refusing to replace $JARS_DIR: it holds files other than jars"
        fi
        say "resolving Kafka $version jars with Maven into $JARS_DIR ..."
        tmp="$JARS_DIR.tmp.$$"
        rm -rf "$tmp"
        # output shown only on failure (mvn -q still prints stray ANSI resets)
        if ! out="$("$MVN" -B -q -Dstyle.color=never -f "$POM" dependency:copy-dependencies \
            -DoutputDirectory="$tmp" -DincludeScope=runtime 2>&1)"; then
            printf '%s\n' "$out" >&2
            rm -rf "$tmp"
            die "Maven could not resolve the Kafka jars (see output above)"
        fi
        [[ -f "$tmp/kafka_2.13-$version.jar" ]] || { rm -rf "$tmp"; die "kafka_2.13-$version.jar missing after Maven run"; }
        rm -rf "$JARS_DIR"
        mv "$tmp" "$JARS_DIR"
    fi
    flock -u 9
    exec 9>&-
}

java_tool() {
    "$JAVA" -Xmx256m -Dlog4j.configuration="file:$LOG4J" -cp "$JARS_DIR/*" "$@"
}

write_properties() {
    cat >"$PROPS" <<EOF
# Generated by kafka.sh on every start; edits are lost.
process.roles=broker,controller
node.id=1
controller.quorum.voters=1@$HOST:$CPORT
listeners=PLAINTEXT://$HOST:$PORT,CONTROLLER://$HOST:$CPORT
advertised.listeners=PLAINTEXT://$HOST:$PORT
listener.security.protocol.map=PLAINTEXT:PLAINTEXT,CONTROLLER:PLAINTEXT
inter.broker.listener.name=PLAINTEXT
controller.listener.names=CONTROLLER
log.dirs=$DATA_DIR

# single node: replication factor 1 everywhere (transactions hang otherwise)
num.partitions=1
default.replication.factor=1
min.insync.replicas=1
offsets.topic.replication.factor=1
offsets.topic.num.partitions=4
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
transaction.state.log.num.partitions=4
auto.create.topics.enable=true
delete.topic.enable=true

# fast tests, small machine
group.initial.rebalance.delay.ms=0
num.network.threads=2
num.io.threads=4
num.recovery.threads.per.data.dir=1
log.retention.hours=24
EOF
    if [[ -n "${KAFKA_EXTRA_PROPERTIES:-}" ]]; then
        printf '\n# KAFKA_EXTRA_PROPERTIES\n%s\n' "$KAFKA_EXTRA_PROPERTIES" >>"$PROPS"
    fi
}

format_storage() {
    [[ -f "$DATA_DIR/meta.properties" ]] && return 0
    local cluster_id
    if [[ -s "$WORK_DIR/cluster.id" ]]; then
        cluster_id="$(cat "$WORK_DIR/cluster.id")"
    else
        cluster_id="$(java_tool kafka.tools.StorageTool random-uuid 2>>"$LOG_FILE" | tail -n 1)"
        [[ "$cluster_id" =~ ^[A-Za-z0-9_-]{22}$ ]] || die "StorageTool random-uuid gave '$cluster_id'"
        echo "$cluster_id" >"$WORK_DIR/cluster.id"
    fi
    local -a extra=()
    read -ra extra <<<"${KAFKA_FORMAT_ARGS:-}"
    say "formatting $DATA_DIR (cluster id $cluster_id)"
    java_tool kafka.tools.StorageTool format -t "$cluster_id" -c "$PROPS" "${extra[@]}" >>"$LOG_FILE" 2>&1 ||
        { log_tail; die "storage format failed"; }
}

kill_broker() { # pid
    local pid="$1" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null; do
        if ((waited >= STOP_TIMEOUT * 10)); then
            say "still alive after ${STOP_TIMEOUT}s, sending SIGKILL to $pid"
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

# Wait until the broker ($1) answers on the client port; kill it on failure.
wait_ready() {
    local pid="$1" start=$SECONDS
    while :; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            log_tail
            die "broker process $pid exited during start-up"
        fi
        if port_answers "$PORT"; then
            say "broker ready on $HOST:$PORT (pid $pid, $((SECONDS - start))s, log $LOG_FILE)"
            return 0
        fi
        if ((SECONDS - start >= START_TIMEOUT)); then
            say "not answering on $HOST:$PORT after ${START_TIMEOUT}s; killing pid $pid"
            kill_broker "$pid"
            rm -f "$PID_FILE"
            log_tail
            die "broker start timed out"
        fi
        sleep 0.2
    done
}

cmd_start() {
    local pid
    mkdir -p "$WORK_DIR"
    touch "$MARKER"
    # one `start` at a time per work dir (fd 8 is closed for the broker)
    exec 8>"$WORK_DIR/.start.lock"
    flock 8
    if pid="$(running_pid)"; then
        if port_answers "$PORT"; then
            say "already running on $HOST:$PORT (pid $pid)"
            return 0
        fi
        say "pid $pid alive but port $PORT not answering yet; waiting"
        wait_ready "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    port_answers "$PORT" && die "port $HOST:$PORT is already in use by another process"
    port_answers "$CPORT" && die "controller port $HOST:$CPORT is already in use by another process"
    command -v "$JAVA" >/dev/null || die "'$JAVA' not found (need Java 11+)"

    ensure_jars
    mkdir -p "$DATA_DIR"
    write_properties
    format_storage

    printf '\n===== kafka.sh start %s (port %s, controller %s) =====\n' \
        "$(date -Is)" "$PORT" "$CPORT" >>"$LOG_FILE"
    # Detached (own session, stdio to the log file) so that callers capturing
    # our output (subprocess.run, $(...)) never wait on the broker's pipes.
    # The inner shell writes its own pid then execs java: the pid is java's.
    # shellcheck disable=SC2016,SC2086
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$JAVA" $HEAP_OPTS -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
        -Djava.awt.headless=true $JVM_OPTS \
        -Dlog4j.configuration="file:$LOG4J" \
        -cp "$JARS_DIR/*" kafka.Kafka "$PROPS" \
        </dev/null >>"$LOG_FILE" 2>&1 8>&- &
    local launcher=$!
    for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.05; done
    pid="$(cat "$PID_FILE" 2>/dev/null || echo "$launcher")"
    say "started pid $pid, waiting up to ${START_TIMEOUT}s for $HOST:$PORT ..."
    wait_ready "$pid"
}

cmd_stop() {
    local pid clean="${KAFKA_CLEAN:-0}"
    [[ "${1:-}" == "--clean" ]] && clean=1
    if pid="$(running_pid)"; then
        say "stopping pid $pid ..."
        kill_broker "$pid"
        say "stopped"
    else
        say "not running"
    fi
    rm -f "$PID_FILE"
    if [[ "$clean" == 1 && -d "$WORK_DIR" ]]; then
        # only ever delete a directory this script created
        if [[ -f "$MARKER" ]]; then
            rm -rf "$WORK_DIR"
            say "removed $WORK_DIR"
        else
            die "refusing to delete $WORK_DIR: no $(basename "$MARKER") marker"
        fi
    fi
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        if port_answers "$PORT"; then
            say "running on $HOST:$PORT (pid $pid, work dir $WORK_DIR)"
            return 0
        fi
        say "pid $pid alive but $HOST:$PORT not answering (starting or unhealthy)"
        return 1
    fi
    if port_answers "$PORT"; then
        say "not running from $WORK_DIR (but something else answers on $HOST:$PORT)"
    else
        say "not running (port $PORT, work dir $WORK_DIR)"
    fi
    return 3
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop "${2:-}" ;;
clean) cmd_stop --clean ;;
status) cmd_status ;;
logs) tail -n "${2:-100}" "$LOG_FILE" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
