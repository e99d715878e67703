// `splitcheck assemble`: per-stage part files, written by the Python part writer
// (python/tests/pp_run.py through /usr/bin/python3) or by this test with the C++ writer,
// join into a dump equal to the one-writer dump of the same run (`compare` exits 0, and
// every dataset's order and digest and every object's attributes are the same); parts
// that cannot make one dump are refused with exit 2 and nothing written.
#include "harness/dump/assemble.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

#include "harness/dump/dump.h"
#include "tests/cli_fixture.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;
using cli_test::quote;

// Everything two dumps must share to be the same content: the datasets (path, dtype,
// shape, order, digest), the objects, and every object's attributes.
void expect_same_content(const fs::path& a_path, const fs::path& b_path) {
  Result<DumpReader> a = DumpReader::open(a_path.string());
  Result<DumpReader> b = DumpReader::open(b_path.string());
  ASSERT_TRUE(a.is_ok()) << a.status().message();
  ASSERT_TRUE(b.is_ok()) << b.status().message();
  ASSERT_EQ(a->datasets().size(), b->datasets().size());
  for (size_t i = 0; i < a->datasets().size(); ++i) {
    const DatasetInfo& x = a->datasets()[i];
    const DatasetInfo& y = b->datasets()[i];
    EXPECT_EQ(x.path, y.path);
    EXPECT_EQ(x.order, y.order) << x.path;
    EXPECT_EQ(x.dtype, y.dtype) << x.path;
    EXPECT_EQ(x.shape, y.shape) << x.path;
    EXPECT_EQ(x.digest, y.digest) << x.path;
  }
  ASSERT_EQ(a->objects(), b->objects());
  for (const std::string& object : a->objects()) {
    Result<std::map<std::string, AttributeValue>> x = a->attributes(object);
    Result<std::map<std::string, AttributeValue>> y = b->attributes(object);
    ASSERT_TRUE(x.is_ok() && y.is_ok()) << object;
    EXPECT_EQ(x->size(), y->size()) << object;
    for (const auto& [name, value] : *x) {
      auto it = y->find(name);
      ASSERT_NE(it, y->end()) << object << " " << name;
      EXPECT_EQ(value.type, it->second.type) << object << " " << name;
      EXPECT_EQ(value.text, it->second.text) << object << " " << name;
    }
  }
}

Tensor filled(DType dtype, Shape shape, int seed) {
  Tensor t = Tensor::zeros(dtype, std::move(shape));
  for (int64_t i = 0; i < t.numel(); ++i) {
    if (dtype == DType::kBF16) t.data<uint16_t>()[i] = static_cast<uint16_t>(0x3f80 + seed + i);
    if (dtype == DType::kF32) t.data<float>()[i] = 0.25f * static_cast<float>(seed + i);
    if (dtype == DType::kI32) t.data<int32_t>()[i] = static_cast<int32_t>(seed * 10 + i);
  }
  return t;
}

DumpHeader header() {
  DumpHeader h;
  h.scenario_json = R"({"name": "assemble"})";
  h.scenario_sha256 = std::string(64, '0');
  h.model_sha256 = std::string(64, '1');
  h.partition = "0-1|1-2";
  h.backend = "cpu";
  h.producer_json = R"({"name": "assemble_test"})";
  h.env_json = "{}";
  h.level = "layer";
  h.created = "2024-01-01T00:00:00Z";
  return h;
}

// A two-stage run of one layer each, one forward: what each stage writes, in its order.
struct Record {
  std::string path;
  Tensor value;
  int stage;
  bool joined;
};

std::vector<Record> records() {
  Tensor dispatch0 = filled(DType::kI32, {2, 4}, 1), dispatch1 = filled(DType::kI32, {3, 4}, 2);
  Tensor trace0 = Tensor::zeros(DType::kI32, {2}), trace1 = filled(DType::kI32, {3}, 0);
  for (int64_t i = 0; i < 3; ++i) trace1.data<int32_t>()[i] = 1;
  return {{"/forward/0/input_ids", filled(DType::kI32, {3}, 4), 0, false},
          {"/forward/0/layers/0/pre_attn", filled(DType::kBF16, {3, 4}, 5), 0, false},
          {"/forward/0/layers/1/pre_attn", filled(DType::kBF16, {3, 4}, 6), 1, false},
          {"/forward/0/logits", filled(DType::kF32, {3, 5}, 7), 1, false},
          {"/forward/0/dispatch", dispatch0, 0, true},
          {"/forward/0/dispatch", dispatch1, 1, true},
          {"/stage_trace/0", trace0, 0, true},
          {"/stage_trace/0", trace1, 1, true}};
}

Status group_attributes(DumpWriter& w, int stage) {
  RETURN_IF_ERROR(w.set_attr("/forward/0", "kind", "prefill"));
  RETURN_IF_ERROR(w.set_attr("/forward/0", "first_position", int64_t{0}));
  RETURN_IF_ERROR(w.set_attr("/forward/0", "last_position", int64_t{2}));
  for (int s = 0; s < 2; ++s) {
    if (stage >= 0 && s != stage) continue;
    const std::string g = "/stages/" + std::to_string(s);
    RETURN_IF_ERROR(w.set_attr(g, "layer_begin", int64_t{s}));
    RETURN_IF_ERROR(w.set_attr(g, "layer_end", int64_t{s + 1}));
  }
  if (stage != 0) RETURN_IF_ERROR(w.set_attr("/spec", "mean_accepted", 0.375));
  return Status::ok();
}

// The dump one writer writes once it holds every stage's records.
Status write_one(const fs::path& path) {
  ASSIGN_OR_RETURN(DumpWriter w, DumpWriter::create(path.string(), header()));
  std::vector<Record> rs = records();
  for (size_t i = 0; i < rs.size(); ++i) {
    if (!rs[i].joined) {
      RETURN_IF_ERROR(w.write(rs[i].path, rs[i].value));
      continue;
    }
    if (rs[i].stage != 0) continue;
    const Tensor& a = rs[i].value;
    const Tensor& b = rs[i + 1].value;
    Shape shape = a.shape();
    shape[0] += b.shape()[0];
    Tensor both = Tensor::zeros(a.dtype(), shape);
    std::memcpy(both.data<std::byte>(), a.bytes(), a.nbytes());
    std::memcpy(both.data<std::byte>() + a.nbytes(), b.bytes(), b.nbytes());
    RETURN_IF_ERROR(w.write(rs[i].path, both));
  }
  RETURN_IF_ERROR(group_attributes(w, -1));
  return w.finish();
}

// Stage `stage`'s part, with the part header and each dataset's position.
struct PartOptions {
  std::string run = "run-1";
  int64_t layer_begin = -1;   // default: the stage's own
  std::string extra_dataset;  // a dataset the stage should not hold
  std::string partition = "0-1|1-2";
};

Status write_part(const fs::path& path, int stage, const PartOptions& o = {}) {
  DumpHeader h = header();
  h.partition = o.partition;
  ASSIGN_OR_RETURN(DumpWriter w, DumpWriter::create(path.string(), h));
  RETURN_IF_ERROR(w.set_attr("/", "part_format", kPartFormat));
  RETURN_IF_ERROR(w.set_attr("/", "part_format_version", kPartFormatVersion));
  RETURN_IF_ERROR(w.set_attr("/", "part_run", o.run));
  RETURN_IF_ERROR(w.set_attr("/", "part_stage", int64_t{stage}));
  RETURN_IF_ERROR(w.set_attr("/", "part_stages", int64_t{2}));
  RETURN_IF_ERROR(
      w.set_attr("/", "part_layer_begin", o.layer_begin >= 0 ? o.layer_begin : int64_t{stage}));
  RETURN_IF_ERROR(w.set_attr("/", "part_layer_end", int64_t{stage + 1}));
  auto put = [&](const std::string& p, const Tensor& t, bool joined) -> Status {
    RETURN_IF_ERROR(w.write(p, t));
    RETURN_IF_ERROR(w.set_attr(p, "part_segment", int64_t{0}));
    RETURN_IF_ERROR(w.set_attr(p, "part_rank", joined ? int64_t{1} << 20 : int64_t{0}));
    return w.set_attr(p, "part_joined", int64_t{joined ? 1 : 0});
  };
  for (const Record& r : records())
    if (r.stage == stage) RETURN_IF_ERROR(put(r.path, r.value, r.joined));
  if (!o.extra_dataset.empty())
    RETURN_IF_ERROR(put(o.extra_dataset, filled(DType::kI32, {3}, 9), false));
  RETURN_IF_ERROR(group_attributes(w, stage));
  return w.finish();
}

class AssembleTest : public cli_test::CliFixture {
 protected:
  AssembleTest() : CliFixture("splitcheck_assemble_") {}

  std::string p(const std::string& name) const { return quote(path(name).string()); }

  // Writes one.h5, part-0.h5 and part-1.h5 with the C++ writer.
  void write_own_run() {
    ASSERT_TRUE(write_one(path("one.h5")).is_ok());
    for (int s = 0; s < 2; ++s) {
      Status st = write_part(path("part-" + std::to_string(s) + ".h5"), s);
      ASSERT_TRUE(st.is_ok()) << st.message();
    }
  }
};

TEST_F(AssembleTest, PartsOfThePythonPartWriterEqualTheOneWriterDump) {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy, xxhash' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py, numpy and xxhash";
  for (const std::string flag : {"", " --interleaved-taps"}) {
    SCOPED_TRACE("pp_run.py" + flag);
    const std::string script = std::string(SPLITCHECK_SOURCE_DIR) + "/python/tests/pp_run.py";
    const std::string cmd = "/usr/bin/python3 " + quote(script) + " " + quote(dir_.string()) +
                            flag + " >" + p("py.txt") + " 2>&1";
    ASSERT_EQ(std::system(cmd.c_str()), 0) << cli_test::file_text(path("py.txt"));
    fs::remove(path("assembled.h5"));
    cli_test::CliResult r = cli("assemble " + p("part-2.h5") + " " + p("part-0.h5") + " " +
                                p("part-1.h5") + " --out " + p("assembled.h5"));
    ASSERT_EQ(r.code, 0) << r.out << r.err;
    EXPECT_NE(r.out.find("3 stages of run pp-run-1"), std::string::npos) << r.out;
    r = cli("verify-dump " + p("assembled.h5"));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    r = cli("compare " + p("one.h5") + " " + p("assembled.h5"));
    EXPECT_EQ(r.code, 0) << r.out << r.err;
    expect_same_content(path("one.h5"), path("assembled.h5"));
  }
}

TEST_F(AssembleTest, ItsOwnPartsEqualTheOneWriterDump) {
  write_own_run();
  Result<AssembleSummary> s = assemble_parts(
      {path("part-1.h5").string(), path("part-0.h5").string()}, path("assembled.h5").string());
  ASSERT_TRUE(s.is_ok()) << s.status().message();
  EXPECT_EQ(s->run, "run-1");
  EXPECT_EQ(s->stages, 2);
  EXPECT_EQ(s->datasets, 6u);
  expect_same_content(path("one.h5"), path("assembled.h5"));
  cli_test::CliResult r = cli("compare " + p("one.h5") + " " + p("assembled.h5"));
  EXPECT_EQ(r.code, 0) << r.out << r.err;
  Result<DumpReader> a = DumpReader::open(path("assembled.h5").string());
  ASSERT_TRUE(a.is_ok());
  Result<Tensor> trace = a->read("/stage_trace/0");
  ASSERT_TRUE(trace.is_ok());
  EXPECT_EQ(std::vector<int32_t>(trace->data<int32_t>(), trace->data<int32_t>() + 5),
            (std::vector<int32_t>{0, 0, 1, 1, 1}));
  EXPECT_FALSE(a->attr_string("/", "part_run").is_ok());  // the part header stays behind
}

TEST_F(AssembleTest, RefusesPartsThatCannotMakeOneDumpWithExit2AndWritesNothing) {
  write_own_run();
  const std::string out = " --out " + p("out.h5");
  auto refused = [&](const std::string& parts, std::initializer_list<std::string> needles) {
    cli_test::expect_one_line_refusal(cli("assemble " + parts + out), needles);
    EXPECT_FALSE(fs::exists(path("out.h5")));
    EXPECT_FALSE(fs::exists(path("out.h5.partial")));
  };
  refused(p("part-0.h5"), {"missing stage 1 of 2", "run-1"});
  fs::copy_file(path("part-0.h5"), path("again.h5"));
  refused(p("part-0.h5") + " " + p("again.h5") + " " + p("part-1.h5"),
          {"stage 0 given twice", "again.h5", "part-0.h5"});
  refused(p("one.h5") + " " + p("part-1.h5"), {"one.h5", "not a part file"});

  PartOptions other, moved, wide, dup;
  other.run = "run-2";
  moved.partition = "0-1|1-3";
  wide.layer_begin = 0;
  dup.extra_dataset = "/forward/0/input_ids";
  ASSERT_TRUE(write_part(path("other.h5"), 1, other).is_ok());
  refused(p("part-0.h5") + " " + p("other.h5"), {"other.h5", "run-2", "run-1"});
  ASSERT_TRUE(write_part(path("moved.h5"), 1, moved).is_ok());
  refused(p("part-0.h5") + " " + p("moved.h5"), {"moved.h5", "partition", "not one run"});
  ASSERT_TRUE(write_part(path("wide.h5"), 1, wide).is_ok());
  refused(p("part-0.h5") + " " + p("wide.h5"), {"wide.h5", "layers 0-2", "overlap"});
  ASSERT_TRUE(write_part(path("dup.h5"), 1, dup).is_ok());
  refused(p("part-0.h5") + " " + p("dup.h5"),
          {"dup.h5", "/forward/0/input_ids", "part-0.h5", "overlap"});
  refused(p("part-0.h5") + " " + p("missing.h5"), {"missing.h5"});
}

TEST_F(AssembleTest, RefusesAPartWhoseBytesDoNotMatchTheirDigestAndKeepsTheOldOutput) {
  write_own_run();
  std::optional<uint64_t> offset;
  {
    Result<DumpReader> r = DumpReader::open(path("part-1.h5").string());
    ASSERT_TRUE(r.is_ok());
    offset = r->contiguous_offset("/forward/0/logits");
  }
  ASSERT_TRUE(offset.has_value());
  {
    std::fstream f(path("part-1.h5"), std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(*offset));
    f.put('\x7f');
  }
  cli_test::write_text(path("out.h5"), "older");
  cli_test::expect_one_line_refusal(
      cli("assemble " + p("part-0.h5") + " " + p("part-1.h5") + " --out " + p("out.h5")),
      {"part-1.h5", "/forward/0/logits"});
  EXPECT_EQ(cli_test::file_text(path("out.h5")), "older");
  EXPECT_FALSE(fs::exists(path("out.h5.partial")));
}

}  // namespace
}  // namespace splitcheck
