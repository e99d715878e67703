// The message between consecutive stage ranks (mpi_transport.h): a job envelope framed with
// its payload's announcement, so that no message of the payload's own travels before the
// payload (over nccl, its size and header; over mpi, the payload itself). A framing that
// announces more bytes than the message holds is refused, never read past its end.
#include <gtest/gtest.h>

#if SPLITCHECK_HAVE_MPI
#include "harness/transport/mpi_transport.h"
#endif

namespace splitcheck {
namespace {

#if SPLITCHECK_HAVE_MPI
std::vector<std::byte> bytes(std::initializer_list<int> v) {
  std::vector<std::byte> out;
  for (int b : v) out.push_back(std::byte(b));
  return out;
}
#endif

TEST(JobMessageTest, EnvelopeAndAnnouncementComeBackApart) {
#if !SPLITCHECK_HAVE_MPI
  GTEST_SKIP() << "built without SPLITCHECK_MPI";
#else
  const std::vector<std::byte> envelope = bytes({'S', 'C', 'J', 'E', 1, 2, 3});
  const std::vector<std::byte> announcement = bytes({9, 8, 7, 6});
  Result<JobMessage> m = unframe_job_message(frame_job_message(envelope, announcement));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->envelope, envelope);
  EXPECT_EQ(m->announcement, announcement);
  // An empty announcement (a job whose payload needs none) and an empty envelope.
  m = unframe_job_message(frame_job_message(envelope, {}));
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->envelope, envelope);
  EXPECT_TRUE(m->announcement.empty());
  m = unframe_job_message(frame_job_message({}, announcement));
  ASSERT_TRUE(m.is_ok());
  EXPECT_TRUE(m->envelope.empty());
  EXPECT_EQ(m->announcement, announcement);
#endif
}

TEST(JobMessageTest, AFramingLongerThanItsMessageIsRefused) {
#if !SPLITCHECK_HAVE_MPI
  GTEST_SKIP() << "built without SPLITCHECK_MPI";
#else
  std::vector<std::byte> m = frame_job_message(bytes({1, 2, 3, 4}), bytes({5}));
  // The envelope's length says 4; cut the message inside the envelope.
  m.resize(8 + 3);
  Result<JobMessage> r = unframe_job_message(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("malformed job message of 11 bytes"), std::string::npos)
      << r.status().message();
  // A length larger than any message.
  m = frame_job_message(bytes({1}), {});
  m[7] = std::byte(0x7f);
  EXPECT_FALSE(unframe_job_message(m).is_ok());
  // Shorter than the length field itself.
  EXPECT_FALSE(unframe_job_message(bytes({1, 2, 3})).is_ok());
  EXPECT_FALSE(unframe_job_message({}).is_ok());
#endif
}

}  // namespace
}  // namespace splitcheck
