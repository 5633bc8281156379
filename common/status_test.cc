#include "common/status.h"

#include <cerrno>

#include <gtest/gtest.h>

namespace holdfast {
namespace {

Result<int> ParsePositive(int v) {
  if (v <= 0) return InvalidArgumentError("value must be > 0, got " + std::to_string(v));
  return v;
}

Status UseTwice(int v, int* out) {
  HF_ASSIGN_OR_RETURN(int a, ParsePositive(v));
  HF_ASSIGN_OR_RETURN(int b, ParsePositive(v));
  *out = a + b;
  return Status::Ok();
}

TEST(StatusTest, ErrnoMapsToActionableCodes) {
  EXPECT_EQ(ErrnoError("open /x", ENOENT).code(), StatusCode::kNotFound);
  EXPECT_EQ(ErrnoError("write /x", ENOSPC).code(), StatusCode::kResourceExhausted);
  EXPECT_EQ(ErrnoError("read /x", EIO).code(), StatusCode::kIoError);
  EXPECT_EQ(ErrnoError("open /x", ENOENT).message(), "open /x: No such file or directory");
}

TEST(StatusTest, MacrosPropagateTheFirstError) {
  int out = 0;
  EXPECT_TRUE(UseTwice(3, &out).ok());
  EXPECT_EQ(out, 6);
  Status s = UseTwice(-1, &out);
  EXPECT_EQ(s.code(), StatusCode::kInvalidArgument);
  EXPECT_EQ(s.ToString(), "InvalidArgument: value must be > 0, got -1");
  EXPECT_EQ(s.WithContext("config.toml:3").message(), "config.toml:3: value must be > 0, got -1");
}

}  // namespace
}  // namespace holdfast
