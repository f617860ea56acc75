"""The Delta tables by name in a catalog (``sink.database``), as a Spark user reads them:
``spark.table("shop.orders")``, ``spark.readStream.table("shop.orders__changelog")``.

The tables stay where the layout puts them (``<path>/<db>/<table>``, ...): each is registered as an
external table of that location (``CREATE TABLE ... USING delta LOCATION``), when gtidsnap creates it
and, for tables created before the names were asked for, when the sink opens. gtidsnap writes them by
their location as before; a name and a path are the same table. The default catalog is Spark's own
metastore kept beside a local output (``<path>/_gtidsnap_catalog``: Derby, no server; one Spark
application at a time can open it); a Hive metastore server is named by ``sink.metastore_uris`` with
``sink.metastore = "external"``, and any other catalog (a plugin such as Unity Catalog's) is configured
through ``sink.spark_conf``.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from gtidsnap.config.loading import SinkSettings
from gtidsnap.config.values import plain_catalog_name, plain_name
from gtidsnap.core.errors import ConfigError, OutputRefusedError, SinkError
from gtidsnap.core.model import TableId
from gtidsnap.sinks.delta.layout import (
    CHANGELOG_SUFFIX,
    HISTORY_SUFFIX,
    DeltaTableRef,
    changelog_path,
    mirror_path,
)

if TYPE_CHECKING:
    from pyspark.sql import SparkSession

log = logging.getLogger("gtidsnap.sinks.delta")

CATALOG_FOLDER = "_gtidsnap_catalog"  # the embedded metastore and warehouse, beside the tables
NAME_SUFFIXES = {"mirror": "", "changelog": "__changelog", "history": "__history"}


def _quoted(name: str) -> str:
    return "`" + name.replace("`", "``") + "`"


@dataclass(frozen=True)
class TableNames:
    """How the tables of a source table are named: ``catalog.database.name``."""

    catalog: str
    database: str  # a template: {db}
    table_name: str  # a template: {db}, {table}

    @classmethod
    def of(cls, settings: SinkSettings) -> TableNames | None:
        """The names ``settings`` ask for (None: tables by path only)."""
        if not settings.database:
            return None
        template = settings.table_name or ("{table}" if "{db}" in settings.database else "{db}__{table}")
        for text, what in ((settings.database, "sink.database"), (template, "sink.table_name")):
            try:
                text.format(db="d", table="t")
            except (KeyError, IndexError, ValueError) as exc:
                raise ConfigError(
                    f"{what} = {text!r} is not a name template ({{db}}, {{table}}): {exc}"
                ) from None
        return cls(settings.catalog, settings.database, template)

    def database_of(self, table: TableId) -> str:
        return self.database.format(db=table.schema, table=table.name)

    def problem(self, table: TableId) -> str | None:
        """Why ``table``'s names would be refused by the metastore (its schema or name holds a sign the
        templates pass on: a space, a dot, a ``-``), said before any is registered; None: they would not."""
        for made, setting in (
            (self.database_of(table), "sink.database"),
            (self.table_name.format(db=table.schema, table=table.name), "sink.table_name"),
        ):
            if not plain_catalog_name(made):
                return (
                    f"{plain_name(str(table))} would be named {plain_name(made)} by {setting}, which a "
                    "metastore refuses (letters, digits and underscores only): set sink.database and "
                    "sink.table_name to templates whose names it takes, or leave sink.database empty"
                )
        return None

    def name_of(self, table: TableId, kind: str = "mirror") -> str:
        """The table's name as SQL writes it, quoted: ``catalog`.`database`.`name``."""
        name = self.table_name.format(db=table.schema, table=table.name) + NAME_SUFFIXES[kind]
        return ".".join(_quoted(p) for p in (self.catalog, self.database_of(table), name))

    def register(self, spark: SparkSession, ref: DeltaTableRef) -> str:
        """``ref``'s table by name (its database created if missing); a name that already names a
        table elsewhere is refused. Returns the name."""
        problem = self.problem(ref.table)
        if problem is not None:
            raise ConfigError(problem)
        name = self.name_of(ref.table, ref.kind)
        database = ".".join(_quoted(p) for p in (self.catalog, self.database_of(ref.table)))
        spark.sql(f"CREATE DATABASE IF NOT EXISTS {database}")
        location = ref.path.replace("'", "\\'")
        spark.sql(f"CREATE TABLE IF NOT EXISTS {name} USING delta LOCATION '{location}'")
        held = location_of(spark, name)
        if same_place(held, ref.path):
            return name
        raise OutputRefusedError(
            f"{name} already names the table at {held}, not {ref.path}: choose another sink.database or "
            "sink.table_name, or drop that name"
        )

    def register_all(self, spark: SparkSession, refs: list[DeltaTableRef]) -> None:
        for ref in refs:
            self.register(spark, ref)


def check_names(settings: SinkSettings, tables: Iterable[TableId]) -> None:
    """A ConfigError naming the first of ``tables`` whose names (``sink.database``) a metastore would
    refuse: said before a run opens anything (a table a signal adds later is checked when registered)."""
    names = TableNames.of(settings)
    for table in tables if names is not None else ():
        problem = names.problem(table) if names is not None else None
        if problem is not None:
            raise ConfigError(problem)


def location_of(spark: SparkSession, name: str) -> str:
    """Where the Delta table named ``name`` is (a catalog name as SQL writes it)."""
    row = spark.sql(f"DESCRIBE DETAIL {name}").select("location").first()
    if row is None or not row[0]:
        raise SinkError(f"{name} names no Delta table with a location")
    return str(row[0])


def same_place(a: str, b: str) -> bool:
    def plain(path: str) -> str:
        for prefix in ("file://", "file:"):
            if path.startswith(prefix):
                path = path[len(prefix) :]
        return path.rstrip("/")

    return plain(a) == plain(b)


def paths_of(spark: SparkSession, name: str) -> tuple[str, str]:
    """The mirror's and the changelog's locations, from the mirror's name (the layout puts the
    changelog beside it)."""
    mirror = location_of(spark, name)
    for suffix in (CHANGELOG_SUFFIX, HISTORY_SUFFIX):
        if mirror.endswith(suffix):
            raise SinkError(f"{name} is a {suffix[1:]}, not a mirror: name the mirror")
    return mirror, mirror + CHANGELOG_SUFFIX


def catalog_spark_conf(settings: SinkSettings, root: str) -> tuple[dict[str, str], list[str]]:
    """The Spark settings (and JVM options) the names need, with ``sink.spark_conf`` over them: the
    embedded metastore beside a local output, unless another is configured."""
    conf = dict(settings.spark_conf)
    if not settings.database or settings.catalog != "spark_catalog":
        return conf, []
    if settings.metastore != "embedded":
        if not settings.metastore_uris:
            return conf, []
        server = {  # a Hive metastore server; the databases gtidsnap creates get a location beside it
            "spark.sql.catalogImplementation": "hive",
            "spark.hadoop.hive.metastore.uris": settings.metastore_uris,
            "spark.sql.warehouse.dir": f"{root}/{CATALOG_FOLDER}/warehouse",
        }
        return {**server, **conf}, []
    if "://" in root and not root.startswith("file:"):
        raise ConfigError(
            f"sink.database with the embedded metastore needs a local sink.path, not {root}: set "
            'sink.metastore = "external" and configure the catalog in sink.spark_conf'
        )
    folder = os.path.join(root.removeprefix("file:"), CATALOG_FOLDER)
    embedded = {
        "spark.sql.catalogImplementation": "hive",
        "spark.hadoop.javax.jdo.option.ConnectionURL": (
            f"jdbc:derby:;databaseName={folder}/metastore_db;create=true"
        ),
        "spark.sql.warehouse.dir": f"{folder}/warehouse",
        "spark.hadoop.datanucleus.schema.autoCreateAll": "true",
        "spark.hadoop.hive.metastore.schema.verification": "false",
    }
    return {**embedded, **conf}, [f"-Dderby.system.home={folder}"]


def sink_spark_session(
    settings: SinkSettings, root: str, app_name: str = "gtidsnap", log_file: Path | None = None
) -> SparkSession:
    """The SparkSession of the sink's settings: its master, and the catalog its names need."""
    from gtidsnap.sinks.delta.spark_session import build_spark_session

    conf, java_options = catalog_spark_conf(settings, root)
    return build_spark_session(app_name, settings.spark_master, None, conf, log_file, java_options)


class Registrar:
    """Registers each table of an output by name once, as it comes to exist (see the module
    docstring)."""

    def __init__(self, spark: SparkSession, names: TableNames) -> None:
        self.spark, self.names = spark, names
        self._done: set[str] = set()

    @classmethod
    def of(
        cls, spark: SparkSession, settings: SinkSettings, existing: list[DeltaTableRef]
    ) -> Registrar | None:
        """The registrar of ``settings``' names (None: by path only), ``existing`` tables registered."""
        names = TableNames.of(settings)
        if names is None:
            return None
        registrar = cls(spark, names)
        for ref in existing:
            registrar.register(ref)
        return registrar

    def register(self, ref: DeltaTableRef) -> None:
        if ref.path not in self._done:
            name = self.names.register(self.spark, ref)
            self._done.add(ref.path)
            log.info("%s is %s", ref.path, name)

    def created(self, root: str, tables: Iterable[TableId], paths: set[str]) -> None:
        """Register the mirrors and changelogs of ``tables`` among ``paths`` (those created)."""
        for table in tables:
            for kind, path in (
                ("mirror", mirror_path(root, table)),
                ("changelog", changelog_path(root, table)),
            ):
                if path in paths:
                    self.register(DeltaTableRef(table, kind, path))  # type: ignore[arg-type]
