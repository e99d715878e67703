// The message between consecutive stage ranks (mpi_transport.h): a job envelope framed with
// its payloads' announcements (a forward's one, a serving step's one a segment), so that no
// message of a payload's own travels before the payload (over nccl, its size and header;
// over mpi, the payload itself). A framing that announces more bytes than the message
// holds is refused, never read past its end.
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

TEST(JobMessageTest, EnvelopeAndAnnouncementsComeBackApart) {
#if !SPLITCHECK_HAVE_MPI
  GTEST_SKIP() << "built without SPLITCHECK_MPI";
#else
  const std::vector<std::byte> envelope = bytes({'S', 'C', 'J', 'E', 1, 2, 3});
  const std::vector<std::byte> a = bytes({9, 8, 7, 6}), b = bytes({5});
  // A forward's one announcement.
  Result<JobMessage> m = unframe_job_message(frame_job_message(envelope, {a}));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->envelope, envelope);
  ASSERT_EQ(m->announcements.size(), 1u);
  EXPECT_EQ(m->announcements[0], a);
  // A serving step's, one a segment, in order, an empty one among them (a payload that
  // needs no announcement).
  m = unframe_job_message(frame_job_message(envelope, {a, {}, b}));
  ASSERT_TRUE(m.is_ok()) << m.status().message();
  EXPECT_EQ(m->envelope, envelope);
  EXPECT_EQ(m->announcements, (std::vector<std::vector<std::byte>>{a, {}, b}));
  // None (a step of updates only), and an empty envelope.
  m = unframe_job_message(frame_job_message(envelope, {}));
  ASSERT_TRUE(m.is_ok());
  EXPECT_EQ(m->envelope, envelope);
  EXPECT_TRUE(m->announcements.empty());
  m = unframe_job_message(frame_job_message({}, {a}));
  ASSERT_TRUE(m.is_ok());
  EXPECT_TRUE(m->envelope.empty());
  EXPECT_EQ(m->announcements, std::vector<std::vector<std::byte>>{a});
#endif
}

TEST(JobMessageTest, AFramingLongerThanItsMessageIsRefused) {
#if !SPLITCHECK_HAVE_MPI
  GTEST_SKIP() << "built without SPLITCHECK_MPI";
#else
  std::vector<std::byte> m = frame_job_message(bytes({1, 2, 3, 4}), {bytes({5})});
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
  // No announcement count after the envelope.
  m = frame_job_message(bytes({1, 2}), {});
  m.resize(8 + 2);
  r = unframe_job_message(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("no announcement count"), std::string::npos)
      << r.status().message();
  // The second of two announcements cut short, and a count of more than the message holds.
  m = frame_job_message(bytes({1}), {bytes({2, 3}), bytes({4, 5, 6})});
  std::vector<std::byte> cut(m.begin(), m.end() - 1);
  r = unframe_job_message(cut);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("announcement 2 of 2 is cut short"), std::string::npos)
      << r.status().message();
  m[8 + 1] = std::byte(3);  // the count, after the 1-byte envelope: 3 announcements of 2
  EXPECT_FALSE(unframe_job_message(m).is_ok());
  // Bytes past the last announcement.
  m = frame_job_message(bytes({1}), {bytes({2})});
  m.push_back(std::byte(0));
  r = unframe_job_message(m);
  ASSERT_FALSE(r.is_ok());
  EXPECT_NE(r.status().message().find("1 bytes past its last announcement"), std::string::npos)
      << r.status().message();
#endif
}

}  // namespace
}  // namespace splitcheck
