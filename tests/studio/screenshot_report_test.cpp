// The screenshot run's report: which frames count toward the UI time while training, the mean,
// p95 and max of the summary, and the lines printed (the picture's line only when it was written,
// the Eval panel's files when it is shown).
#include <catch2/catch.hpp>

#include "app/studio/screenshot_report.h"

using namespace odyssey::studio;

TEST_CASE("screenshot report: start-up frames and idle frames are not measured", "[studio][screenshot]") {
  TrainingFrameTimes times;
  for (long frame = 1; frame <= TrainingFrameTimes::kStartupFrames; ++frame) times.add(frame, true, 50.0, 40.0);
  times.add(TrainingFrameTimes::kStartupFrames + 1, false, 9.0, 8.0);  // the run does not train
  CHECK(times.wall_ms.empty());
  times.add(TrainingFrameTimes::kStartupFrames + 2, true, 3.0, 2.0);
  CHECK(times.wall_ms == std::vector<double>{3.0});
  CHECK(times.cpu_ms == std::vector<double>{2.0});
}

TEST_CASE("screenshot report: mean, p95 and max of the frame times", "[studio][screenshot]") {
  CHECK_FALSE(summarize_frame_times({}));
  // 1..20 shuffled: sorted, index 20 x 95 / 100 = 19 holds 20; the mean is 21 / 2.
  std::vector<double> ms;
  for (int i = 0; i < 20; ++i) ms.push_back(double((i * 7) % 20 + 1));
  const auto s = summarize_frame_times(ms);
  REQUIRE(s);
  CHECK(s->frames == 20);
  CHECK(s->mean_ms == 10.5);
  CHECK(s->p95_ms == 20.0);
  CHECK(s->max_ms == 20.0);
  // 100 frames: index 95 of 0..99 is 95.
  ms.clear();
  for (int i = 99; i >= 0; --i) ms.push_back(double(i));
  CHECK(summarize_frame_times(ms)->p95_ms == 95.0);
}

TEST_CASE("screenshot report: the lines odyssey-studio prints", "[studio][screenshot]") {
  StudioOptions opts;
  opts.screenshot = "shot.png";
  AppState state;
  state.frame.add(2.0);
  state.frame.add(4.0);
  TrainingFrameTimes times;
  times.add(11, true, 3.0, 1.0);
  times.add(12, true, 5.0, 3.0);
  const std::string text = screenshot_report(opts, state, times, true, 1440, 900, "font 15 px", 12, 1.5);
  CHECK(text ==
        "odyssey-studio: wrote shot.png (1440x900, font 15 px, 12 frames; UI 3.00 ms/frame mean, 4.00 ms max over the "
        "last 12; run 1.5 s)\n"
        "odyssey-studio: UI wall time per frame while training: mean 4.00 ms, p95 5.00 ms, max 5.00 ms over 2 frames\n"
        "odyssey-studio: UI thread CPU time per frame while training: mean 2.00 ms, p95 3.00 ms, max 3.00 ms over 2 "
        "frames\n");
  // A picture that was not written has no line; the measurements still print.
  const std::string unwritten = screenshot_report(opts, state, times, false, 1440, 900, "font 15 px", 12, 1.5);
  CHECK(unwritten.find("wrote") == std::string::npos);
  CHECK(unwritten.find("UI wall time per frame while training") != std::string::npos);
  // With the Eval panel shown: what it read (here an empty directory).
  state.show[static_cast<int>(PanelId::Eval)] = true;
  state.eval.library.refresh("no-such-run-dir", 0.0);
  CHECK(screenshot_report(opts, state, times, false, 1, 1, "", 1, 0)
            .find("odyssey-studio: Eval panel: 0 evaluation(s) in no-such-run-dir, 0 unreadable\n") !=
        std::string::npos);
  opts.bench_samples = 1000;
  CHECK(screenshot_report(opts, state, times, false, 1, 1, "", 1, 0).find("with the synthetic samples") !=
        std::string::npos);
}
