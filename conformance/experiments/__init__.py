"""End-to-end experiments that run the verified losses on small, fully enumerable problems."""
