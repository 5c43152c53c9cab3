// kwb's JSON Schemas (schemas/kwb.*.schema.json, schemas/README.md) compiled into kwb by cmake/embed_schemas.cmake,
// so that kwb mcp declares each tool's outputSchema with the very files the tests validate kwb's output against.
#pragma once

#include <string_view>
#include <vector>

namespace kwb::cli {

struct SchemaFile {
  std::string_view name;  // "kwb.check": the file schemas/kwb.check.schema.json, and its "title"
  std::string_view text;  // the file's content
};

// Every schema file, by name in alphabetical order.
const std::vector<SchemaFile>& schema_files();

}  // namespace kwb::cli
