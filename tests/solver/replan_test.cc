// Re-placement decisions: triggers, hysteresis and cooldown.
#include <gtest/gtest.h>

#include "solver/replan.h"

namespace tessera::solver {
namespace {

const Slo kSlo{0.5, 0.05, 90, 0.9};

ReplanInput healthy(double now) {
  ReplanInput in;
  in.now_s = now;
  in.live = {10, 500, 100, 0.3, 0.03, 0.97};
  in.predicted = {10, 500, 100, 0.3, 0.03};
  return in;
}

TEST(Replan, HealthyKeeps) {
  ReplanDecision d = decide_replan(kSlo, {}, {}, healthy(0));
  EXPECT_EQ(d.action, ReplanAction::kKeep);
  EXPECT_TRUE(d.reasons.empty());
}

TEST(Replan, ViolationMustPersistBeforeSwitching) {
  ReplanPolicy pol;
  ReplanState st;
  ReplanInput in = healthy(1000);
  in.live.attainment = 0.8;
  in.current_goodput_per_cost = 1.0;
  in.best_goodput_per_cost = 1.05;  // not better by the threshold: only the violation drives it
  in.best_is_current = false;
  for (int w = 1; w <= 2; ++w) {
    ReplanDecision d = decide_replan(kSlo, pol, st, in);
    EXPECT_EQ(d.action, ReplanAction::kKeep) << w;
    EXPECT_EQ(d.state.violated_windows, w);
    st = d.state;
  }
  ReplanDecision d = decide_replan(kSlo, pol, st, in);
  EXPECT_EQ(d.action, ReplanAction::kSwitch);
  EXPECT_EQ(d.state.violated_windows, 0);
  EXPECT_EQ(d.state.last_switch_s, 1000);
  // A healthy window in between resets the count.
  ReplanState mid;
  mid = decide_replan(kSlo, pol, mid, in).state;
  mid = decide_replan(kSlo, pol, mid, healthy(1000)).state;
  EXPECT_EQ(mid.violated_windows, 0);
}

TEST(Replan, ViolationWithoutASolveAsksForOne) {
  ReplanState st{2, 0, -1e300};
  ReplanInput in = healthy(0);
  in.live.tpot_s = 0.08;
  ReplanDecision d = decide_replan(kSlo, {}, st, in);
  EXPECT_EQ(d.action, ReplanAction::kResolve);
  ASSERT_FALSE(d.reasons.empty());
  EXPECT_NE(d.reasons[0].find("TPOT"), std::string::npos);
}

TEST(Replan, CooldownHoldsASwitchBack) {
  ReplanState st{2, 0, 900};
  ReplanInput in = healthy(1000);
  in.live.ttft_s = 0.9;
  in.best_goodput_per_cost = 2, in.current_goodput_per_cost = 1, in.best_is_current = false;
  ReplanDecision d = decide_replan(kSlo, ReplanPolicy{}, st, in);
  EXPECT_NE(d.action, ReplanAction::kSwitch);
  EXPECT_NE(d.reasons.back().find("cooldown"), std::string::npos);
  in.now_s = 1600;
  EXPECT_EQ(decide_replan(kSlo, ReplanPolicy{}, st, in).action, ReplanAction::kSwitch);
}

TEST(Replan, BetterPlanWithHysteresisBand) {
  ReplanPolicy pol;  // threshold 15%, reset below 7.5%
  ReplanState st;
  ReplanInput in = healthy(5000);
  in.current_goodput_per_cost = 1.0;
  in.best_is_current = false;
  in.best_goodput_per_cost = 1.2;
  st = decide_replan(kSlo, pol, st, in).state;
  st = decide_replan(kSlo, pol, st, in).state;
  EXPECT_EQ(st.worse_windows, 2);
  in.best_goodput_per_cost = 1.10;  // inside the band: the count neither grows nor resets
  st = decide_replan(kSlo, pol, st, in).state;
  EXPECT_EQ(st.worse_windows, 2);
  in.best_goodput_per_cost = 1.2;
  ReplanDecision d = decide_replan(kSlo, pol, st, in);
  EXPECT_EQ(d.action, ReplanAction::kSwitch);
  in.best_goodput_per_cost = 1.05;  // under half the threshold: reset
  EXPECT_EQ(decide_replan(kSlo, pol, ReplanState{2, 2, -1e300}, in).state.worse_windows, 0);
}

TEST(Replan, DriftAndModelErrorAskForAResolve) {
  ReplanInput in = healthy(0);
  in.live.rate = 14;  // +40%
  ReplanDecision d = decide_replan(kSlo, {}, {}, in);
  EXPECT_EQ(d.action, ReplanAction::kResolve);
  EXPECT_NE(d.reasons[0].find("rate"), std::string::npos);
  in = healthy(0);
  in.live.mean_input = 900;
  EXPECT_EQ(decide_replan(kSlo, {}, {}, in).action, ReplanAction::kResolve);
  in = healthy(0);
  in.live.tpot_s = 0.045;  // within the SLO, but 50% over the prediction at the planned rate
  d = decide_replan(kSlo, {}, {}, in);
  EXPECT_EQ(d.action, ReplanAction::kResolve);
  EXPECT_NE(d.reasons[0].find("re-profile"), std::string::npos);
}

}  // namespace
}  // namespace tessera::solver
