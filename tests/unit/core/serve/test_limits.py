from app.core.serve.limits import RateLimiter


def test_each_address_has_its_own_bucket_that_refills():
    now = [0.0]
    rate = RateLimiter(per_s=2.0, burst=3, clock=lambda: now[0])
    assert [rate.allow("a") for _ in range(4)] == [True, True, True, False]
    assert rate.allow("b")  # a storm from "a" leaves "b" served
    now[0] += 0.5
    assert rate.allow("a") and not rate.allow("a")
