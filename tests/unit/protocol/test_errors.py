import grpc
import pytest

from embedtext.protocol import errors


@pytest.mark.parametrize(
    "code, cls",
    [
        (grpc.StatusCode.INVALID_ARGUMENT, errors.InvalidInputError),
        (grpc.StatusCode.NOT_FOUND, errors.ModelNotFoundError),
        (grpc.StatusCode.RESOURCE_EXHAUSTED, errors.OverloadedError),
        (grpc.StatusCode.UNAVAILABLE, errors.UnavailableError),
        (grpc.StatusCode.DEADLINE_EXCEEDED, errors.DeadlineExceededError),
        (grpc.StatusCode.INTERNAL, errors.InternalError),
        (grpc.StatusCode.UNKNOWN, errors.InternalError),
    ],
)
def test_table_maps_both_ways(code, cls):
    exc = errors.from_status(code, "boom", target="t:1")
    assert type(exc) is cls
    assert "boom" in str(exc) and "t:1" in str(exc)
    if code != grpc.StatusCode.UNKNOWN:
        assert errors.to_status(cls("x")) == (code, "x")


def test_every_error_class_has_a_distinct_code():
    codes = [cls.code for cls in errors._ERRORS]
    assert len(codes) == len(set(codes))


def test_a_cancel_the_client_never_asked_for_is_unavailable():
    """The clients never cancel a call they wait for: CANCELLED came from a server going away."""
    assert type(errors.from_status(grpc.StatusCode.CANCELLED, "Cancelled")) is errors.UnavailableError
