// The dump format: round trips, execution order, byte determinism, readability from
// Python, and every way a user's file can be wrong.
#include "harness/dump/dump.h"

#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <thread>

#include "harness/dump/digest.h"

namespace splitcheck {
namespace {

namespace fs = std::filesystem;

class DumpTest : public ::testing::Test {
 protected:
  void SetUp() override {
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           ("splitcheck_dump_test_" + std::to_string(::getpid()) + "_" + info->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  std::string file(const std::string& name) const { return (dir_ / name).string(); }

  static DumpHeader header() {
    DumpHeader h;
    h.scenario_json = R"({"model":"k3-tiny","seed":1})";
    h.scenario_sha256 = std::string(64, 'a');
    h.model_sha256 = std::string(64, 'b');
    h.partition = "0-12|12-32";
    h.backend = "cpu";
    h.producer_json = R"({"name":"splitcheck","version":"0.1.0"})";
    h.env_json = R"({"compiler":"gcc"})";
    h.level = "layer";
    h.created = "2024-05-01T12:00:00Z";
    return h;
  }

  static Tensor bf16_tensor() {
    Tensor t = Tensor::zeros(DType::kBF16, {3, 4});
    for (int i = 0; i < 12; ++i) t.data<bf16>()[i] = to_bf16(static_cast<float>(i) - 5.5f);
    return t;
  }
  static Tensor f32_tensor() {
    Tensor t = Tensor::zeros(DType::kF32, {2, 5});
    for (int i = 0; i < 10; ++i) t.data<float>()[i] = 0.25f * static_cast<float>(i * i) - 3;
    return t;
  }
  static Tensor i32_tensor() {
    Tensor t = Tensor::zeros(DType::kI32, {6});
    for (int i = 0; i < 6; ++i) t.data<int32_t>()[i] = i * 1000 - 2;
    return t;
  }

  // Writes the standard three-dtype dump at `path`.
  void write_standard(const std::string& path, bool compress = false) {
    Result<DumpWriter> w = DumpWriter::create(path, header(), compress);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    ASSERT_TRUE(w->write("/forward/0/input_ids", i32_tensor()).is_ok());
    ASSERT_TRUE(w->write("/forward/0/layers/0/pre_attn", bf16_tensor()).is_ok());
    ASSERT_TRUE(w->write("/forward/0/logits", f32_tensor()).is_ok());
    ASSERT_TRUE(w->set_attr("/forward/0", "kind", "prefill").is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }

  static std::string slurp(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
  }

  fs::path dir_;
};

TEST_F(DumpTest, RoundTripsEveryDtypeAndTheHeader) {
  const std::string path = file("a.h5");
  write_standard(path);
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  const DumpHeader& h = r->header();
  EXPECT_EQ(h.scenario_json, header().scenario_json);
  EXPECT_EQ(h.scenario_sha256, header().scenario_sha256);
  EXPECT_EQ(h.model_sha256, header().model_sha256);
  EXPECT_EQ(h.partition, "0-12|12-32");
  EXPECT_EQ(h.backend, "cpu");
  EXPECT_EQ(h.producer_json, header().producer_json);
  EXPECT_EQ(h.env_json, header().env_json);
  EXPECT_EQ(h.level, "layer");
  EXPECT_EQ(h.created, "2024-05-01T12:00:00Z");
  EXPECT_EQ(h.volatile_attrs, "created,partition,producer,env");

  const Tensor expected[] = {i32_tensor(), bf16_tensor(), f32_tensor()};
  const char* paths[] = {"/forward/0/input_ids", "/forward/0/layers/0/pre_attn",
                         "/forward/0/logits"};
  ASSERT_EQ(r->datasets().size(), 3u);
  for (int i = 0; i < 3; ++i) {
    const DatasetInfo& info = r->datasets()[i];
    EXPECT_EQ(info.path, paths[i]);
    EXPECT_EQ(info.order, i);
    EXPECT_EQ(info.dtype, expected[i].dtype());
    EXPECT_EQ(info.shape, expected[i].shape());
    EXPECT_EQ(info.nbytes, expected[i].nbytes());
    EXPECT_EQ(info.digest, dataset_digest_hex({expected[i].bytes(), expected[i].nbytes()}));
    Result<Tensor> t = r->read(paths[i]);
    ASSERT_TRUE(t.is_ok()) << t.status().message();
    EXPECT_TRUE(t->bit_equal(expected[i])) << paths[i];
    Result<std::string> dtype = r->attr_string(paths[i], "dtype");
    ASSERT_TRUE(dtype.is_ok());
    EXPECT_EQ(*dtype, dtype_name(expected[i].dtype()));
  }
  Result<std::string> kind = r->attr_string("/forward/0", "kind");
  ASSERT_TRUE(kind.is_ok()) << kind.status().message();
  EXPECT_EQ(*kind, "prefill");
  Result<int64_t> version = r->attr_int("/", "format_version");
  ASSERT_TRUE(version.is_ok());
  EXPECT_EQ(*version, 2);
  EXPECT_EQ(r->header().format_version, 2);
  EXPECT_TRUE(r->exists("/forward/0/layers"));
  EXPECT_TRUE(r->exists("forward/0/logits"));
  EXPECT_FALSE(r->exists("/forward/1/logits"));
  EXPECT_FALSE(r->exists("/nothing"));
}

TEST_F(DumpTest, ScalarAndEmptyTensorsRoundTrip) {
  const std::string path = file("a.h5");
  {
    Result<DumpWriter> w = DumpWriter::create(path, header());
    ASSERT_TRUE(w.is_ok());
    Tensor scalar = Tensor::zeros(DType::kF32, {});
    scalar.data<float>()[0] = 42.5f;
    ASSERT_TRUE(w->write("/scalar", scalar).is_ok());
    ASSERT_TRUE(w->write("/empty", Tensor::zeros(DType::kBF16, {0, 4})).is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  Result<Tensor> scalar = r->read("/scalar");
  ASSERT_TRUE(scalar.is_ok()) << scalar.status().message();
  EXPECT_TRUE(scalar->shape().empty());
  EXPECT_EQ(scalar->data<float>()[0], 42.5f);
  Result<Tensor> empty = r->read("/empty");
  ASSERT_TRUE(empty.is_ok());
  EXPECT_EQ(empty->shape(), (Shape{0, 4}));
}

TEST_F(DumpTest, DatasetsAreListedInWriteOrderNotNameOrder) {
  const std::string path = file("a.h5");
  {
    Result<DumpWriter> w = DumpWriter::create(path, header());
    ASSERT_TRUE(w.is_ok());
    for (const char* name : {"/z", "/a/b", "/m", "/a/a"})
      ASSERT_TRUE(w->write(name, i32_tensor()).is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok());
  std::vector<std::string> names;
  for (const DatasetInfo& d : r->datasets()) names.push_back(d.path);
  EXPECT_EQ(names, (std::vector<std::string>{"/z", "/a/b", "/m", "/a/a"}));
}

TEST_F(DumpTest, ReadChunkReadsRowsAlongTheFirstAxis) {
  const std::string path = file("a.h5");
  write_standard(path, /*compress=*/true);
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok());
  std::vector<std::byte> out;
  ASSERT_TRUE(r->read_chunk("/forward/0/layers/0/pre_attn", 1, 2, out).is_ok());
  Tensor t = bf16_tensor();
  ASSERT_EQ(out.size(), 2u * 4 * 2);
  EXPECT_EQ(std::memcmp(out.data(), t.bytes() + 4 * 2, out.size()), 0);
  Status past_end = r->read_chunk("/forward/0/layers/0/pre_attn", 2, 2, out);
  EXPECT_EQ(past_end.code(), StatusCode::kInvalidInput);
  EXPECT_NE(past_end.message().find("pre_attn"), std::string::npos);
}

TEST_F(DumpTest, SameContentGivesByteIdenticalFiles) {
  // The writes are a second apart so a stored timestamp would show.
  for (bool compress : {false, true}) {
    const std::string a = file(compress ? "ca.h5" : "a.h5");
    const std::string b = file(compress ? "cb.h5" : "b.h5");
    write_standard(a, compress);
    std::this_thread::sleep_for(std::chrono::milliseconds(1100));
    write_standard(b, compress);
    std::string bytes_a = slurp(a), bytes_b = slurp(b);
    ASSERT_FALSE(bytes_a.empty());
    EXPECT_TRUE(bytes_a == bytes_b) << "compress=" << compress;
  }
}

TEST_F(DumpTest, LargeAttributesAndAttributeKinds) {
  const std::string path = file("a.h5");
  DumpHeader h = header();
  h.scenario_json = std::string(200000, 'x');  // past the 64 KiB object-header limit
  {
    Result<DumpWriter> w = DumpWriter::create(path, h);
    ASSERT_TRUE(w.is_ok()) << w.status().message();
    ASSERT_TRUE(w->write("/forward/0/logits", f32_tensor()).is_ok());
    ASSERT_TRUE(w->set_attr("/forward/0", "positions_first", 0).is_ok());
    ASSERT_TRUE(w->set_attr("/forward/0", "positions_last", int64_t{17}).is_ok());
    ASSERT_TRUE(w->set_attr("/spec", "acceptance_rate", 0.625).is_ok());
    ASSERT_TRUE(w->set_attr("/spec", "acceptance_rate", 0.75).is_ok());  // replaced
    ASSERT_TRUE(w->set_attr("/forward/0/logits", "note", std::string("tail")).is_ok());
    ASSERT_TRUE(w->set_attr("/stages/1", "embedding", "missing").is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->header().scenario_json.size(), 200000u);
  EXPECT_EQ(*r->attr_int("/forward/0", "positions_last"), 17);
  EXPECT_EQ(*r->attr_double("/forward/0", "positions_last"), 17.0);
  EXPECT_EQ(*r->attr_double("/spec", "acceptance_rate"), 0.75);
  EXPECT_EQ(*r->attr_string("/forward/0/logits", "note"), "tail");
  EXPECT_EQ(*r->attr_string("/stages/1", "embedding"), "missing");
  EXPECT_FALSE(r->attr_int("/spec", "acceptance_rate").is_ok());  // a float, not an int
  Result<std::string> missing = r->attr_string("/spec", "nope");
  ASSERT_FALSE(missing.is_ok());
  EXPECT_NE(missing.status().message().find(path), std::string::npos);
}

TEST_F(DumpTest, WritingAPathTwiceIsAnError) {
  Result<DumpWriter> w = DumpWriter::create(file("a.h5"), header());
  ASSERT_TRUE(w.is_ok());
  ASSERT_TRUE(w->write("/x", i32_tensor()).is_ok());
  Status again = w->write("/x", i32_tensor());
  EXPECT_FALSE(again.is_ok());
  EXPECT_NE(again.message().find("/x"), std::string::npos);
  EXPECT_FALSE(w->write("/x/under_a_dataset", i32_tensor()).is_ok());
}

TEST_F(DumpTest, PartialFileNeverAppearsAtTheFinalPath) {
  const std::string path = file("a.h5");
  {
    Result<DumpWriter> w = DumpWriter::create(path, header());
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE(w->write("/x", f32_tensor()).is_ok());
    EXPECT_FALSE(fs::exists(path));
    EXPECT_TRUE(fs::exists(path + ".partial"));
  }  // destroyed without finish()
  EXPECT_FALSE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
  // A finished write replaces an older file at the final path atomically.
  write_standard(path);
  EXPECT_TRUE(fs::exists(path));
  EXPECT_FALSE(fs::exists(path + ".partial"));
}

// Each error is kInvalidInput and names the file.
void expect_invalid(const Result<DumpReader>& r, const std::string& path,
                    const std::string& words) {
  ASSERT_FALSE(r.is_ok()) << path;
  EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
  EXPECT_NE(r.status().message().find(path), std::string::npos) << r.status().message();
  EXPECT_NE(r.status().message().find(words), std::string::npos) << r.status().message();
}

TEST_F(DumpTest, RejectsMissingAndNonHdf5Files) {
  expect_invalid(DumpReader::open(file("absent.h5")), file("absent.h5"), "no such file");
  const std::string text = file("text.h5");
  std::ofstream(text) << "{\"this\": \"is json, not HDF5\"}\n";
  expect_invalid(DumpReader::open(text), text, "not an HDF5 file");
  const std::string empty = file("empty.h5");
  std::ofstream(empty).close();
  expect_invalid(DumpReader::open(empty), empty, "not an HDF5 file");
}

TEST_F(DumpTest, RejectsTruncatedFiles) {
  const std::string good = file("good.h5");
  {
    Result<DumpWriter> w = DumpWriter::create(good, header());
    ASSERT_TRUE(w.is_ok());
    ASSERT_TRUE(w->write("/forward/0/logits", Tensor::zeros(DType::kF32, {64, 256})).is_ok());
    ASSERT_TRUE(w->finish().is_ok());
  }
  const std::string bytes = slurp(good);
  for (size_t keep : {bytes.size() / 2, bytes.size() - 1, size_t{600}, size_t{100}}) {
    const std::string cut = file("cut_" + std::to_string(keep) + ".h5");
    std::ofstream(cut, std::ios::binary).write(bytes.data(), static_cast<std::streamsize>(keep));
    Result<DumpReader> r = DumpReader::open(cut);
    ASSERT_FALSE(r.is_ok()) << "kept " << keep << " of " << bytes.size();
    EXPECT_EQ(r.status().code(), StatusCode::kInvalidInput);
    EXPECT_NE(r.status().message().find(cut), std::string::npos) << r.status().message();
  }
}

// Creates a plain HDF5 file with one float32 dataset and no root attributes.
void write_plain_hdf5(const std::string& path) {
  hid_t f = H5Fcreate(path.c_str(), H5F_ACC_TRUNC, H5P_DEFAULT, H5P_DEFAULT);
  hsize_t dims[1] = {4};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  double data[4] = {1, 2, 3, 4};
  hid_t ds = H5Dcreate2(f, "/values", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT, H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
}

// Replaces a root attribute of an existing dump with an int64 or string value.
void replace_root_attr(const std::string& path, const char* name, int64_t value) {
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  H5Adelete(f, name);
  hid_t space = H5Screate(H5S_SCALAR);
  hid_t a = H5Acreate2(f, name, H5T_STD_I64LE, space, H5P_DEFAULT, H5P_DEFAULT);
  H5Awrite(a, H5T_NATIVE_INT64, &value);
  H5Aclose(a);
  H5Sclose(space);
  H5Fclose(f);
}

TEST_F(DumpTest, RejectsMissingOrWrongFormatAttributes) {
  const std::string plain = file("plain.h5");
  write_plain_hdf5(plain);
  expect_invalid(DumpReader::open(plain), plain, "missing attribute format");

  for (int64_t version : {0, 3}) {
    const std::string other = file("v" + std::to_string(version) + ".h5");
    write_standard(other);
    replace_root_attr(other.c_str(), "format_version", version);
    expect_invalid(
        DumpReader::open(other), other,
        "unsupported format_version " + std::to_string(version) + " (this build reads 1 to 2)");
  }

  const std::string numeric_format = file("numeric_format.h5");
  write_standard(numeric_format);
  replace_root_attr(numeric_format, "format", 7);
  expect_invalid(DumpReader::open(numeric_format), numeric_format, "format is not a string");
}

TEST_F(DumpTest, RejectsDatasetsOfUnsupportedTypesNamingThem) {
  const std::string path = file("f64.h5");
  write_standard(path);
  hid_t f = H5Fopen(path.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
  hsize_t dims[1] = {2};
  hid_t space = H5Screate_simple(1, dims, nullptr);
  double data[2] = {1, 2};
  hid_t ds = H5Dcreate2(f, "/forward/0/doubles", H5T_IEEE_F64LE, space, H5P_DEFAULT, H5P_DEFAULT,
                        H5P_DEFAULT);
  H5Dwrite(ds, H5T_NATIVE_DOUBLE, H5S_ALL, H5S_ALL, H5P_DEFAULT, data);
  H5Dclose(ds);
  H5Sclose(space);
  H5Fclose(f);
  expect_invalid(DumpReader::open(path), path, "/forward/0/doubles: unsupported datatype float64");
}

TEST_F(DumpTest, PythonH5pyReadsTheDump) {
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string path = file("a.h5");
  write_standard(path);
  const std::string script = file("check.py");
  std::ofstream(script) << R"PY(
import sys, h5py, numpy as np
def s(v):
    return v.decode() if isinstance(v, bytes) else str(v)
with h5py.File(sys.argv[1], "r") as f:
    assert s(f.attrs["format"]) == "splitcheck.dump", f.attrs["format"]
    assert int(f.attrs["format_version"]) == 2
    assert s(f.attrs["partition"]) == "0-12|12-32"
    assert s(f.attrs["level"]) == "layer"
    assert "created" in s(f.attrs["volatile"]).split(",")
    names = []
    f.visititems(lambda n, o: names.append(n) if isinstance(o, h5py.Dataset) else None)
    assert sorted(names) == ["forward/0/input_ids", "forward/0/layers/0/pre_attn",
                             "forward/0/logits"], names
    x = f["forward/0/layers/0/pre_attn"]
    assert x.dtype == np.uint16 and x.shape == (3, 4), (x.dtype, x.shape)
    assert s(x.attrs["dtype"]) == "bfloat16"
    vals = (x[()].astype(np.uint32) << 16).view(np.float32)
    assert vals[0, 0] == -5.5 and vals[2, 3] == 5.5, vals
    assert int(x.attrs["order"]) == 1
    assert s(x.attrs["digest"]).startswith("xxh3:")
    l = f["forward/0/logits"]
    assert l.dtype == np.float32 and l.shape == (2, 5) and s(l.attrs["dtype"]) == "float32"
    i = f["forward/0/input_ids"]
    assert i.dtype == np.int32 and list(i[()]) == [-2, 998, 1998, 2998, 3998, 4998]
    assert s(f["forward/0"].attrs["kind"]) == "prefill"
print("ok")
)PY";
  const std::string cmd =
      "/usr/bin/python3 " + script + " " + path + " > " + file("py.out") + " 2>&1";
  int rc = std::system(cmd.c_str());
  EXPECT_EQ(rc, 0) << slurp(file("py.out"));
}

TEST_F(DumpTest, ReadsStringAttributesWrittenByH5py) {
  // h5py writes str attributes as variable-length UTF-8; external engines use it.
  if (std::system("/usr/bin/python3 -c 'import h5py, numpy' >/dev/null 2>&1") != 0)
    GTEST_SKIP() << "/usr/bin/python3 cannot import h5py";
  const std::string path = file("py.h5");
  const std::string cmd =
      "/usr/bin/python3 -c '\n"
      "import sys, h5py, numpy as np\n"
      "with h5py.File(sys.argv[1], \"w\") as f:\n"
      "    f.attrs[\"format\"] = \"splitcheck.dump\"\n"
      "    f.attrs[\"format_version\"] = 1\n"
      "    f.attrs[\"backend\"] = \"torch\"\n"
      "    d = f.create_dataset(\"forward/0/output\", data=np.arange(6, "
      "dtype=np.uint16).reshape(2, 3))\n"
      "    d.attrs[\"dtype\"] = \"bfloat16\"\n"
      "    d.attrs[\"order\"] = 0\n"
      "' " +
      path;
  ASSERT_EQ(std::system(cmd.c_str()), 0);
  Result<DumpReader> r = DumpReader::open(path);
  ASSERT_TRUE(r.is_ok()) << r.status().message();
  EXPECT_EQ(r->header().backend, "torch");
  ASSERT_EQ(r->datasets().size(), 1u);
  EXPECT_EQ(r->datasets()[0].dtype, DType::kBF16);
  EXPECT_EQ(r->datasets()[0].digest, "");
  Result<Tensor> t = r->read("/forward/0/output");
  ASSERT_TRUE(t.is_ok());
  EXPECT_EQ(t->data<bf16>()[5].bits, 5);
}

}  // namespace
}  // namespace splitcheck
