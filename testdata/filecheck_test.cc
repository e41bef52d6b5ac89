#include "testdata/filecheck.h"

#include "third_party/catch.h"

namespace {

using testdata::filecheck;

const char* kGraph = R"(graph():
    %x : [#users=1] = placeholder[target=x]
    %conv1_weight : [#users=1] = get_attr[target=conv1.weight]
    %conv2d : [#users=1] = call_function[target=aten::conv2d](args = (%x, %conv1_weight), kwargs = {})
    %relu : [#users=1] = call_function[target=aten::relu](args = (%conv2d,), kwargs = {})
    return relu
)";

}  // namespace

TEST_CASE("CHECK finds patterns in order") {
  CHECK(filecheck("CHECK: placeholder\nCHECK: aten::conv2d\nCHECK: return relu", kGraph));
  // Out of order: relu comes after conv2d.
  auto r = filecheck("CHECK: aten::relu\nCHECK: aten::conv2d", kGraph);
  CHECK_FALSE(r);
  CHECK_THAT(r.message, Catch::Contains("CHECK: aten::conv2d") &&
                            Catch::Contains("not found after the last match"));
  // Two matches on one line: the second CHECK starts where the first ended.
  CHECK(filecheck("CHECK: %conv2d\nCHECK: %x", kGraph));
  CHECK_FALSE(filecheck("CHECK: %relu : \nCHECK: aten::conv2d", kGraph));
}

TEST_CASE("CHECK-NEXT and CHECK-SAME pin the line") {
  CHECK(filecheck("CHECK: %conv2d :\nCHECK-NEXT: %relu :\nCHECK-NEXT: return", kGraph));
  auto r = filecheck("CHECK: %x :\nCHECK-NEXT: %conv2d :", kGraph);
  CHECK_FALSE(r);
  CHECK_THAT(r.message, Catch::Contains("not found on the next line") &&
                            Catch::Contains("%conv1_weight"));
  CHECK(filecheck("CHECK: %conv2d :\nCHECK-SAME: args = (%x,\nCHECK-SAME: kwargs", kGraph));
  CHECK_FALSE(filecheck("CHECK: %conv2d :\nCHECK-SAME: aten::relu", kGraph));
  // Before the match, on its line, does not count.
  CHECK_FALSE(filecheck("CHECK: aten::conv2d\nCHECK-SAME: %conv2d :", kGraph));
  CHECK_FALSE(filecheck("CHECK: return\nCHECK-NEXT: x", kGraph));
}

TEST_CASE("CHECK-NOT holds between its neighbours") {
  CHECK(filecheck("CHECK: aten::conv2d\nCHECK-NOT: get_attr\nCHECK: return", kGraph));
  auto r = filecheck("CHECK: placeholder\nCHECK-NOT: get_attr\nCHECK: aten::relu", kGraph);
  CHECK_FALSE(r);
  CHECK_THAT(r.message, Catch::Contains("found where it must not be"));
  CHECK(filecheck("CHECK-NOT: batch_norm\nCHECK: placeholder", kGraph));
  // Trailing: to the end of the text.
  CHECK_FALSE(filecheck("CHECK: aten::conv2d\nCHECK-NOT: return", kGraph));
  CHECK(filecheck("CHECK: return\nCHECK-NOT: conv2d", kGraph));
  // The rest of the matched line counts: %conv2d follows aten::relu there.
  CHECK_FALSE(filecheck("CHECK: aten::relu\nCHECK-NOT: conv2d", kGraph));
}

TEST_CASE("{{regex}} parts and literal metacharacters") {
  CHECK(filecheck("CHECK: %{{conv[0-9]+}}_weight : [#users=1]", kGraph));
  CHECK(filecheck("CHECK: args = (%{{[a-z0-9]+}},), kwargs = {}", kGraph));
  CHECK_FALSE(filecheck("CHECK: %{{conv[3-9]}}_weight", kGraph));
}

TEST_CASE("checks that cannot be read are refused") {
  CHECK_THAT(filecheck("no directives here", kGraph).message,
             Catch::Contains("no CHECK directive"));
  CHECK_THAT(filecheck("CHECK-NEXT: x", kGraph).message,
             Catch::Contains("no match before it"));
  CHECK_THAT(filecheck("CHECK: {{[}}", kGraph).message,
             Catch::Contains("cannot read the pattern"));
  CHECK_THAT(filecheck("CHECK: {{abc", kGraph).message,
             Catch::Contains("cannot read the pattern"));
  CHECK_THAT(filecheck("CHECK:   ", kGraph).message,
             Catch::Contains("empty pattern"));
}
