"""Java artifacts from Maven Central, fetched once into a project-local cache.

Real Apache Kafka (for the integration tests, the real-fault bench and the demo's real cluster)
and Spark's `kafka` connector (`spark-sql-kafka-0-10`, of exactly the installed PySpark's
version: the production source for a configured bus) are plain jars. `fetch(bundle)` resolves a bundle's Maven
coordinates with their dependencies into `<cache>/<bundle>/` once; a second call finds the
marker file and fetches nothing. The cache is `var/jars` beside the project (git ignores
`var/`), or `$FLEETWATCH_JAR_CACHE`.

What runs is what was pinned: Maven runs with strict checksums (`-C`: a download whose `.sha1`
does not match fails the fetch, where Maven would only warn) and a pinned plugin, and a bundle's
folder must hold exactly the jars of `streaming/plumbing/jar_pins.py` with their SHA-256, checked after
every fetch and each time a cached copy is used. Anything else is `JarsUnavailable`, one line.

`python -m streaming.plumbing.jars fetch [BUNDLE ...]` is what `make` runs; `connector` prints the verified
connector jars for spark-submit's `--jars` (deploy/spark/submit.sh, deploy/Dockerfile).
"""

from __future__ import annotations

import argparse
import hashlib
import os
import re
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

from pyspark.version import __version__ as _SPARK_VERSION

from streaming.plumbing.errors import SetupFailure
from streaming.plumbing.jar_pins import JAR_SHA256

__all__ = ["BUNDLES", "JMX_EXPORTER", "SPARK_KAFKA", "Bundle", "JarsUnavailable", "agent_jar", "cache_dir", "classpath",
           "connector_jars", "fetch", "main"]

_COMPLETE = ".complete"
# The plugin that copies a bundle's jars, by its full coordinates: Maven resolves no plugin prefix
# or version from repository metadata (2.8 is the version Maven 3.8's super POM names).
_COPY_DEPENDENCIES = "org.apache.maven.plugins:maven-dependency-plugin:2.8:copy-dependencies"


class JarsUnavailable(SetupFailure):
    """Java or Maven is missing, or Maven Central refused an artifact; the message is one line."""


@dataclass(frozen=True)
class Bundle:
    """A named set of Maven artifacts resolved together, with their runtime dependencies."""

    name: str
    artifacts: tuple[str, ...]  # group:artifact:version
    purpose: str

    def pom(self) -> str:
        deps = "\n".join(
            "    <dependency><groupId>{}</groupId><artifactId>{}</artifactId><version>{}</version></dependency>".format(
                *coordinates.split(":"))
            for coordinates in self.artifacts)
        return (
            '<project xmlns="http://maven.apache.org/POM/4.0.0">\n'
            "  <modelVersion>4.0.0</modelVersion>\n"
            f"  <groupId>fleetwatch.jars</groupId><artifactId>{self.name}</artifactId><version>1</version>\n"
            "  <packaging>pom</packaging>\n"
            f"  <dependencies>\n{deps}\n  </dependencies>\n"
            "</project>\n")


# Kafka logs through slf4j 2 (its own pom resolves an older slf4j-api through a transitive
# dependency, which silently drops every log line); log4j2 writes them to the node's log file.
_KAFKA_LOGGING = ("org.slf4j:slf4j-api:2.0.17", "org.apache.logging.log4j:log4j-core:2.25.3",
                  "org.apache.logging.log4j:log4j-slf4j2-impl:2.25.3")

# Spark's kafka connector must be of the installed PySpark's exact version (it links against
# Spark's internals); pyproject pins PySpark to a version whose connector Maven Central serves.
SPARK_KAFKA = f"spark-sql-kafka-{_SPARK_VERSION}"
JMX_EXPORTER = "jmx-exporter-1.0.1"

BUNDLES: dict[str, Bundle] = {
    b.name: b for b in (
        Bundle("kafka-4.4.0", ("org.apache.kafka:kafka_2.13:4.4.0", *_KAFKA_LOGGING),
               "Apache Kafka 4.4 (KRaft, KIP-1242) for the real-Kafka tests, bench and demo"),
        Bundle("kafka-4.3.1", ("org.apache.kafka:kafka_2.13:4.3.1", *_KAFKA_LOGGING),
               "Apache Kafka 4.3 (no ApiVersions v5): a real broker for the Metadata fallback"),
        Bundle(SPARK_KAFKA, (f"org.apache.spark:spark-sql-kafka-0-10_2.13:{_SPARK_VERSION}",),
               "Spark's kafka connector: the job's source for a configured bus"),
        # The newest version Maven Central serves here (its metadata lists nothing after 1.0.1; 1.1.0
        # to 1.5.0 are refused): one shaded jar, loaded with -javaagent into the controllers' JVMs.
        Bundle(JMX_EXPORTER, ("io.prometheus.jmx:jmx_prometheus_javaagent:1.0.1",),
               "Prometheus JMX exporter agent: the controllers' metrics over HTTP (the controller's view)"),
    )
}


def cache_dir() -> Path:
    configured = os.environ.get("FLEETWATCH_JAR_CACHE")
    if configured:
        return Path(configured)
    return Path(__file__).resolve().parents[2] / "var" / "jars"


def _lib(bundle: str) -> Path:
    return cache_dir() / bundle / "lib"


def fetch(bundle: str, *, quiet: bool = True) -> Path:
    """The bundle's jar folder, resolving it from Maven Central the first time; its jars verified
    against their pinned SHA-256 either way."""
    lib = _lib(bundle)
    pins = _pins(bundle)
    if (lib / _COMPLETE).exists():
        _verify(bundle, lib, pins)
        return lib
    _resolve(bundle, quiet=quiet)
    _verify(bundle, lib, pins)
    (lib / _COMPLETE).touch()
    return lib


def _known(bundle: str) -> Bundle:
    if bundle not in BUNDLES:
        raise JarsUnavailable(f"unknown jar bundle {bundle!r} (known: {', '.join(sorted(BUNDLES))})")
    return BUNDLES[bundle]


def _pins(bundle: str) -> dict[str, str]:
    _known(bundle)
    pins = JAR_SHA256.get(bundle)
    if pins is None:
        raise JarsUnavailable(f"{bundle} has no pinned SHA-256 in streaming/plumbing/jar_pins.py: "
                              f"python -m streaming.plumbing.jars pin {bundle} prints them to check and add")
    return pins


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as file:
        while chunk := file.read(1 << 20):
            digest.update(chunk)
    return digest.hexdigest()


def _verify(bundle: str, lib: Path, pins: dict[str, str] | None = None, jars: list[Path] | None = None) -> None:
    """Raises `JarsUnavailable` unless `lib` holds exactly the bundle's pinned jars and each of
    `jars` (default: all of them) has its pinned SHA-256. Every use hashes again: a Kafka bundle
    costs about 40 ms of CPU, little beside the JVM it starts."""
    pins = _pins(bundle) if pins is None else pins
    present = {jar.name for jar in lib.glob("*.jar")}
    if present != set(pins):
        unpinned, missing = sorted(present - set(pins)) or "none", sorted(set(pins) - present) or "none"
        raise JarsUnavailable(f"{bundle}: {lib} does not hold the pinned jars (not pinned: {unpinned}, missing: "
                              f"{missing}); refused: delete {lib.parent} to fetch it again")
    for jar in sorted(lib / name for name in pins) if jars is None else jars:
        actual = _sha256(jar)
        if actual != pins[jar.name]:
            raise JarsUnavailable(f"{bundle}: {jar} has SHA-256 {actual}, pinned {pins[jar.name]}; refused: "
                                  f"delete {lib.parent} and {cache_dir() / 'repository'} to fetch it again")


def _resolve(bundle: str, *, quiet: bool = True) -> Path:
    """Maven resolves the bundle into its folder (unverified: `fetch` verifies, `pin` prints)."""
    spec = _known(bundle)
    lib = _lib(bundle)
    if shutil.which("java") is None:
        raise JarsUnavailable("Java 17+ is needed (java is not on PATH): apt-get install openjdk-17-jre-headless")
    mvn = shutil.which("mvn")
    if mvn is None:
        raise JarsUnavailable(f"Maven is needed to fetch {bundle} from Maven Central (mvn is not on PATH): "
                              "apt-get install maven")
    work = lib.parent
    work.mkdir(parents=True, exist_ok=True)
    if lib.exists():
        shutil.rmtree(lib)  # a fetch that was cut off: start it again
    (work / "pom.xml").write_text(spec.pom(), encoding="utf-8")
    command = [mvn, "-B", "-C", "-f", str(work / "pom.xml"), f"-Dmaven.repo.local={cache_dir() / 'repository'}",
               _COPY_DEPENDENCIES, "-DincludeScope=runtime", f"-DoutputDirectory={lib}"]
    if quiet:
        command.insert(1, "-q")
    print(f"fleetwatch: fetching {bundle} ({spec.purpose}) from Maven Central", file=sys.stderr)
    result = subprocess.run(command, capture_output=quiet, text=True, check=False)
    if result.returncode != 0:
        last = [line for line in (result.stdout or "").splitlines() if "ERROR" in line][:1]
        raise JarsUnavailable(f"Maven could not fetch {bundle}: {last[0].strip() if last else 'see mvn output'}")
    return lib


def classpath(bundle: str) -> str:
    """A `java -cp` value for the bundle (fetched on first use)."""
    return str(fetch(bundle) / "*")


def _artifact(jar: str) -> str:
    """`kafka-clients-3.9.1.jar` -> `kafka-clients`."""
    return re.sub(r"-\d+(\.\w+)*\.jar$", "", jar)


def agent_jar(bundle: str = JMX_EXPORTER) -> Path:
    """The one jar of an agent bundle (fetched on first use), for `-javaagent:`."""
    jars = sorted(fetch(bundle).glob("*.jar"))
    if len(jars) != 1:
        raise JarsUnavailable(f"{bundle}: expected one agent jar in {_lib(bundle)}, found {len(jars)}")
    return jars[0]


def _spark_ships() -> set[str]:
    """The artifacts in PySpark's own jars folder (where an image bakes the connector)."""
    import pyspark

    return {_artifact(jar.name) for jar in (Path(pyspark.__file__).parent / "jars").glob("*.jar")}


def connector_jars() -> list[Path]:
    """The connector's jars that Spark does not already ship, verified ([] until `make jars`
    fetched them).

    Its dependencies that PySpark has (Scala, Hadoop's client, compression codecs, slf4j) come
    from PySpark's own folder, in PySpark's versions, so the classpath holds each library once.
    """
    lib = _lib(SPARK_KAFKA)
    if not (lib / _COMPLETE).exists():
        return []
    shipped = _spark_ships()
    jars = sorted(jar for jar in lib.glob("*.jar") if _artifact(jar.name) not in shipped)
    _verify(SPARK_KAFKA, lib, jars=jars)
    return jars


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m streaming.plumbing.jars",
                                     description="Fetch Java artifacts into the project-local cache (once).")
    sub = parser.add_subparsers(dest="command", required=True)
    get = sub.add_parser("fetch", help="resolve bundles from Maven Central unless already cached")
    get.add_argument("bundles", nargs="*", metavar="BUNDLE", help=f"default: all ({', '.join(BUNDLES)})")
    sub.add_parser("list", help="the bundles and whether each is cached")
    sub.add_parser("connector", help="fetch Spark's kafka connector unless Spark ships it; print the jars it needs "
                                     "beside Spark's, verified, comma-separated (nothing when Spark ships it)")
    pin = sub.add_parser("pin", help="resolve a bundle with Maven (strict checksums) and print its jars' SHA-256 "
                                     "as an entry of streaming/plumbing/jar_pins.py, to check and add")
    pin.add_argument("bundle", metavar="BUNDLE")
    args = parser.parse_args(argv)
    if args.command == "list":
        for name, bundle in BUNDLES.items():
            state = "cached" if (_lib(name) / _COMPLETE).exists() else "not fetched"
            print(f"{name:<16} {state:<12} {bundle.purpose}")
        return 0
    try:
        if args.command == "pin":
            lib = _resolve(args.bundle)
            print(f'    "{args.bundle}": {{')
            for jar in sorted(lib.glob("*.jar")):
                print(f'        "{jar.name}": "{_sha256(jar)}",')
            print("    },")
        elif args.command == "connector":
            if "spark-sql-kafka-0-10_2.13" not in _spark_ships():  # else baked into Spark's jars (the image)
                fetch(SPARK_KAFKA)
                print(",".join(str(jar) for jar in connector_jars()))
        else:
            for name in args.bundles or list(BUNDLES):
                fetch(name)
    except JarsUnavailable as exc:
        print(f"fleetwatch: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
